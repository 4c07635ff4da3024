"""ingress-nginx basic authentication (``auth-type: basic``) → the IR's ``BasicAuth``. Pure.

Keys (without ``nginx.ingress.kubernetes.io/``), with ingress-nginx's meaning:

* ``auth-type: basic`` switches it on (``digest`` is not served: such an Ingress fails closed);
* ``auth-secret``: the Secret (``name`` or ``<namespace>/name`` of the Ingress's own namespace;
  another namespace is refused, so no Ingress reads another namespace's users);
* ``auth-secret-type``: ``auth-file`` (default: the key ``auth`` holds an htpasswd file) or
  ``auth-map`` (each key a user name, its value the password hash);
* ``auth-realm``: the realm the 401 names.

The engine checks one htpasswd hash, ``{SHA}`` (``htpasswd -s``); ``{PLAIN}`` passwords are
hashed here. Users whose hash is of another kind (``$apr1$``, bcrypt, crypt, ``{SSHA}``) cannot
log in, and a warning names them; with no usable user left, or anything else unusable (no
Secret, no ``auth`` key), every request of the Ingress is refused (403) with an error — never
served open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from podway.ir import AuthRequest, BasicAuth, ErrorPages
from podway.model import Ingress, Secret
from podway.translate.core import htpasswd
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.ingress.nginx.values import PREFIX, NginxAnnotations, quote
from podway.translate.pools.backends import PoolSpec

KEYS = ("auth-type", "auth-secret", "auth-secret-type", "auth-realm")
_FILE_KEY = "auth"  # ingress-nginx's key of an auth-file Secret


def asks_basic(raw: Mapping[str, str]) -> bool:
    """Whether annotations (without PREFIX) ask for basic authentication."""
    return raw.get("auth-type", "").strip() == "basic"


def served_keys(raw: Mapping[str, str]) -> frozenset[str]:
    """The full keys of this family that are served here (none unless ``auth-type: basic``)."""
    return frozenset(PREFIX + k for k in KEYS) if asks_basic(raw) else frozenset()


@dataclass(slots=True)
class Served:
    """What the annotations give: the filter, or ``refused`` (every request answered 403);
    ``errors`` and ``warnings``: (full key, message)."""

    ref: Ingress
    filter: BasicAuth | AuthRequest | ErrorPages | None = None
    refused: bool = False
    key: str = "auth-type"  # the key that closes the Ingress when it cannot be served
    pools: tuple[PoolSpec, ...] = ()  # the auth services the filter sends to
    errors: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)

    def closing(self, found: NginxAnnotations) -> NginxAnnotations:
        """``found`` with ``key`` among the ``closed`` keys when the authentication
        cannot be served: the Ingress then refuses every request (403), as for any unserved
        restriction."""
        if not self.refused:
            return found
        return replace(found, closed=(*found.closed, PREFIX + self.key))

    def problems(self) -> list[Problem]:
        """The errors (InvalidAnnotation) and warnings (UnsupportedValue) as problems."""
        return [Problem(ref=self.ref.ref, reason=reason, message=f"annotation {key}: {text}",
                        field=f"metadata.annotations[{key}]", severity=severity)
                for found, reason, severity in (
                    (self.errors, Reason.INVALID_ANNOTATION, Severity.ERROR),
                    (self.warnings, Reason.UNSUPPORTED_VALUE, Severity.WARNING))
                for key, text in found]

    def refuse(self, key: str, message: str) -> Served:
        self.refused = True
        self.errors.append((PREFIX + key, f"{message}; every request of this Ingress is "
                            "refused (403) until it is fixed"))
        return self


def serve(ingress: Ingress, lookup: Callable[[str, str], Secret | None]) -> Served:
    """The basic authentication of one Ingress's annotations (``lookup(namespace, name)``
    finds a Secret and records the dependency). A canary's own is refused: its requests run
    the main Ingress's routes and filters, so its authentication could not apply."""
    annotations, namespace = ingress.metadata.annotations, ingress.metadata.namespace
    raw = {k.removeprefix(PREFIX): v for k, v in annotations.items() if k.startswith(PREFIX)}
    out = Served(ingress)
    if not asks_basic(raw):
        return out
    if raw.get("canary", "").strip().lower() in ("1", "t", "true"):  # as the reader's flag
        return out.refuse("auth-type", "a canary Ingress's requests are served with the main "
                          "Ingress's settings, so its own authentication cannot apply (set it "
                          "on the main Ingress)")
    ref = raw.get("auth-secret", "").strip()
    if not ref:
        return out.refuse("auth-secret", "auth-type basic needs auth-secret (the htpasswd "
                          "Secret)")
    ns, _, name = ref.rpartition("/")
    if ns and ns != namespace:
        return out.refuse("auth-secret", f"Secret {quote(ref)} is in another namespace; only "
                          f"Secrets of the Ingress's namespace ({namespace}) are read")
    kind = raw.get("auth-secret-type", "auth-file").strip()
    if kind not in ("auth-file", "auth-map"):
        return out.refuse("auth-secret-type", f"{quote(kind)} is neither auth-file nor "
                          "auth-map")
    secret = lookup(namespace, name)
    if secret is None:
        return out.refuse("auth-secret", f"Secret {namespace}/{name} not found")
    if kind == "auth-file":
        data = secret.get(_FILE_KEY)
        if data is None:
            return out.refuse("auth-secret", f"Secret {namespace}/{name} has no key "
                              f"{quote(_FILE_KEY)} (the htpasswd file of auth-secret-type "
                              "auth-file)")
        entries = htpasswd.lines(data.decode("utf-8", "replace"))
    else:
        entries = htpasswd.per_key(secret)
    users, unusable = htpasswd.users(entries)
    if unusable:
        out.warnings.append((PREFIX + "auth-secret", f"users {', '.join(unusable)} of Secret "
                             f"{namespace}/{name} cannot log in: their password hash is not "
                             "{SHA} (the only kind the engine checks; re-create them with "
                             "htpasswd -s)"))
    if not users:
        return out.refuse("auth-secret", f"Secret {namespace}/{name} has no user whose "
                          "password hash the engine can check ({SHA}, htpasswd -s)")
    realm = raw.get("auth-realm", "")
    if realm:
        out.warnings.append((PREFIX + "auth-realm", "the 401 names the request's URL as the "
                             f"realm, not {quote(realm)} (the engine has no realm setting)"))
    out.filter = BasicAuth(users=tuple(users), realm=realm,
                           source=f"Secret {namespace}/{name}")
    return out
