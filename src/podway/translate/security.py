"""A TrafficPolicy's ``security`` section: who may reach the routes of its targets. Pure.

Attached to an HTTPRoute, GRPCRoute or Ingress (its routes) or a Gateway (every route served on
it); the route's own policy wins over its Gateway's, whole (as Envoy Gateway's SecurityPolicy).
Sections:

* ``basicAuth.users``: an htpasswd Secret of the policy's namespace (key ``.htpasswd``, else
  ``auth``); its ``{SHA}``/``{PLAIN}`` users are served by the engine's basic auth (401 for
  anyone else); users with hashes the engine cannot check are named in a warning.

Fail closed: a policy whose security section cannot be served as written — a key Podway does not
know (a mechanism not built yet), no Secret, no usable user, an invalid value elsewhere in the
policy — does not leave its targets open: their routes answer 403 (``Guard.refused``), and the
policy says why (``Accepted=False``/``Invalid``, or ``ResolvedRefs=False``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import BasicAuth, Filter
from podway.model import ObjectRef, Secret
from podway.model.policy import SecuritySpec, TrafficPolicy
from podway.model.snapshot import Snapshot
from podway.translate.core import htpasswd
from podway.translate.core.problems import Reason, Severity, quote

REFUSED_STATUS = 403
_KEYS = (".htpasswd", "auth")
_BUILT = ("basicAuth",)


@dataclass(frozen=True, slots=True)
class Guard:
    """What a policy does to the routes it reaches: ``filters`` to add, or ``refused``."""

    origin: ObjectRef
    filters: tuple[Filter, ...] = ()
    refused: bool = False


@dataclass(slots=True)
class Found:
    """One policy's security, judged: the guard, its problems (reason, message, field,
    severity), and whether its references resolved (None: it has none)."""

    guard: Guard
    problems: list[tuple[Reason, str, str, Severity]] = field(default_factory=list)
    resolved: tuple[bool, Reason, str] | None = None

    def refuse(self, reason: Reason, message: str, where: str) -> Found:
        self.guard = Guard(self.guard.origin, refused=True)
        self.problems.append((reason, f"{message}; the routes it targets answer "
                              f"{REFUSED_STATUS} until it is fixed", where, Severity.ERROR))
        return self


def unknown_keys(spec: SecuritySpec) -> list[str]:
    """``spec.<key>`` paths of keys Podway does not know, in the section and its parts."""
    out = [f"security.{k}" for k in spec.model_extra or {}]
    if spec.basic_auth is not None:
        out += [f"security.basicAuth.{k}" for k in spec.basic_auth.model_extra or {}]
        users = spec.basic_auth.users
        if users is not None:
            out += [f"security.basicAuth.users.{k}" for k in users.model_extra or {}]
    return out


def judge(policy: TrafficPolicy, snapshot: Snapshot, *, invalid: bool) -> Found | None:
    """The security of ``policy`` (None: it has no such section). ``invalid``: the policy has
    a bad value elsewhere, so nothing of it is applied — its targets are refused."""
    spec = policy.spec.security
    if spec is None:
        return None
    out = Found(Guard(policy.ref))
    if invalid:
        out.guard = Guard(policy.ref, refused=True)
        return out
    unknown = unknown_keys(spec)
    if unknown:
        return out.refuse(Reason.UNSUPPORTED_VALUE, f"{unknown[0]} is not served by Podway "
                          f"(served: {', '.join(_BUILT)})", f"spec.{unknown[0]}")
    if spec.basic_auth is None:
        return out.refuse(Reason.INVALID, "security sets no mechanism", "spec.security")
    return _basic_auth(out, policy, snapshot)


def _basic_auth(out: Found, policy: TrafficPolicy, snapshot: Snapshot) -> Found:
    ns = policy.metadata.namespace
    where = "spec.security.basicAuth.users"
    ref = policy.spec.security.basic_auth.users if policy.spec.security and \
        policy.spec.security.basic_auth else None
    if ref is None or not ref.name:
        return out.refuse(Reason.INVALID, "basicAuth needs users (the htpasswd Secret)", where)
    if ref.namespace not in (None, ns):
        out.resolved = (False, Reason.REF_NOT_PERMITTED, f"Secret {ref.namespace}/{ref.name} is "
                        "in another namespace; only the policy's own namespace is read")
        return out.refuse(Reason.REF_NOT_PERMITTED, out.resolved[2], where)
    secret = snapshot.get(Secret, ns, ref.name)
    if secret is None:
        out.resolved = (False, Reason.SECRET_NOT_FOUND, f"Secret {ns}/{ref.name} not found")
        return out.refuse(Reason.SECRET_NOT_FOUND, out.resolved[2], where)
    data = next((d for d in (secret.get(k) for k in _KEYS) if d is not None), None)
    if data is None:
        out.resolved = (False, Reason.INVALID_SECRET, f"Secret {ns}/{ref.name} has no key "
                        f"{quote(_KEYS[0])} or {quote(_KEYS[1])} (an htpasswd file)")
        return out.refuse(Reason.INVALID_SECRET, out.resolved[2], where)
    users, unusable = htpasswd.users(htpasswd.lines(data.decode("utf-8", "replace")))
    if unusable:
        out.problems.append((Reason.UNSUPPORTED_VALUE, f"users {', '.join(unusable)} of Secret "
                             f"{ns}/{ref.name} cannot log in: their password hash is not {{SHA}} "
                             "(the only kind the engine checks; re-create them with htpasswd "
                             "-s)", where, Severity.WARNING))
    if not users:
        out.resolved = (False, Reason.INVALID_SECRET, f"Secret {ns}/{ref.name} has no user "
                        "whose password hash the engine can check ({SHA}, htpasswd -s)")
        return out.refuse(Reason.INVALID_SECRET, out.resolved[2], where)
    out.resolved = (True, Reason.RESOLVED_REFS, f"Secret {ns}/{ref.name}: {len(users)} users")
    out.guard = Guard(policy.ref, filters=(BasicAuth(users=tuple(users),
                                                     source=f"Secret {ns}/{ref.name}"),))
    return out
