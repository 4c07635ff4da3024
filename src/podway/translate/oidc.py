"""A TrafficPolicy's ``security.oidc``: the IR's ``Oidc`` (Envoy Gateway's SecurityPolicy oidc
semantics, in part). Pure.

* ``provider``: ``issuer``, and its ``authorizationEndpoint`` and ``tokenEndpoint``, both
  required. Podway does not read the provider's discovery document (``/.well-known/
  openid-configuration``): fetching it would put network I/O and its failures into the
  translation; the two URLs are copied from that document once, by the user. ``tokenEndpoint``
  is reached through ``backendRef`` (a Service port of the policy's namespace, as remote JWT
  key sets are: Podway does not resolve outside names); ``https``: TLS, the URL's host as SNI
  and as the name the certificate must carry, verified against the engine host's trust store.
* ``clientID``; ``clientSecret``: a Secret of the policy's namespace, key ``client-secret``.
* ``redirectURL`` (default ``%REQ(x-forwarded-proto)%://%REQ(:authority)%/oauth2/callback``:
  the request's own scheme and host) and ``logoutPath`` (default ``/logout``): both must be
  served by a route the policy covers — the engine handles them there.
* ``scopes`` (``openid`` always first), ``resources``, ``cookieNames`` (``accessToken``,
  ``idToken``), ``cookieDomain``, ``forwardAccessToken``.
* The session cookies are signed (and the tokens in them encrypted) with an HMAC secret Podway
  makes per policy: derived from this Podway's OIDC key (``TranslateOptions.oidc_key``) and the
  policy's namespace, name and uid, so every engine, and the next start, agrees on it, and a
  re-created policy starts new sessions. No key: the policy is refused.

Anything else — a URL that is not http(s), a missing Secret, Service or key — refuses the
policy's routes (403): never served open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Iterator
from dataclasses import replace
from urllib.parse import urlsplit

from podway.ir import Listener, Oidc, UpstreamTLS
from podway.ir.evaluate import Request, matches
from podway.model import ObjectRef, Secret, Service
from podway.model.policy import OIDCSpec, TrafficPolicy
from podway.model.snapshot import Snapshot
from podway.translate.core.problems import quote
from podway.translate.jwt import Refused
from podway.translate.pools.backends import PoolSpec, find_port, http_pool

SECRET_KEY = "client-secret"
DEFAULT_REDIRECT = "%REQ(x-forwarded-proto)%://%REQ(:authority)%/oauth2/callback"
DEFAULT_LOGOUT = "/logout"
_COOKIE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def session_key(master: bytes, policy: TrafficPolicy) -> str:
    """The HMAC secret of ``policy``'s sessions (base64), derived from ``master``."""
    meta = policy.metadata
    mac = hmac.new(master, f"podway-oidc/{meta.namespace}/{meta.name}/{meta.uid}".encode(),
                   hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def oidc(policy: TrafficPolicy, snapshot: Snapshot, key: bytes | None
         ) -> tuple[Oidc, PoolSpec, str]:
    """The policy's ``Oidc``, the pool of its token endpoint, and what its references
    resolved to (for ResolvedRefs). Raises ``Refused``."""
    spec = policy.spec.security.oidc if policy.spec.security else None
    assert spec is not None
    ns, name = policy.metadata.namespace, policy.metadata.name
    where = "spec.security.oidc"
    provider = spec.provider
    if provider is None or not provider.issuer:
        raise Refused("oidc needs a provider with an issuer", f"{where}.provider")
    for field_name, url in (("authorizationEndpoint", provider.authorization_endpoint),
                            ("tokenEndpoint", provider.token_endpoint)):
        if not url:
            raise Refused(f"oidc provider.{field_name} is required: Podway does not read the "
                          "provider's discovery document (copy it from "
                          f"{provider.issuer.rstrip('/')}/.well-known/openid-configuration)",
                          f"{where}.provider.{field_name}")
    for field_name, url in (("issuer", provider.issuer),
                            ("authorizationEndpoint", provider.authorization_endpoint),
                            ("tokenEndpoint", provider.token_endpoint),
                            ("endSessionEndpoint", provider.end_session_endpoint)):
        if url and not _is_url(url):
            raise Refused(f"oidc provider.{field_name} {quote(url)} is not an http(s) URL",
                          f"{where}.provider.{field_name}")
    if not spec.client_id:
        raise Refused("oidc needs a clientID", f"{where}.clientID")
    redirect, path = _redirect(spec, where)
    logout = spec.logout_path or DEFAULT_LOGOUT
    if not logout.startswith("/") or logout == path:
        raise Refused(f"oidc logoutPath {quote(logout)} must be a path (starting with /) other "
                      "than the redirect URL's", f"{where}.logoutPath")
    cookies = _cookies(spec, where)
    if key is None:
        raise Refused("this Podway has no OIDC session key to sign the policy's sessions with",
                      where)
    pool, found = _token_pool(spec, policy, snapshot, where)
    secret = _client_secret(spec, policy, snapshot, where)
    scopes = ("openid", *(s for s in spec.scopes if s != "openid"))
    return (Oidc(name=f"{ns}/{name}", pool=pool.name,
                 authorization_endpoint=provider.authorization_endpoint,
                 token_endpoint=provider.token_endpoint,
                 end_session_endpoint=provider.end_session_endpoint,
                 client_id=spec.client_id, client_secret=secret,
                 hmac_secret=session_key(key, policy), redirect_uri=redirect, redirect_path=path,
                 logout_path=logout, scopes=scopes, resources=spec.resources,
                 cookie_names=cookies, cookie_domain=spec.cookie_domain,
                 forward_token=spec.forward_access_token, source=f"TrafficPolicy {ns}/{name}"),
            pool, f"{found}; Secret {ns}/{spec.client_secret.name if spec.client_secret else ''}")


def _is_url(text: str) -> bool:
    url = urlsplit(text)
    return url.scheme in ("http", "https") and bool(url.hostname)


def _redirect(spec: OIDCSpec, where: str) -> tuple[str, str]:
    """The redirect URL (Envoy's formatter may stand for scheme and host) and its path."""
    redirect = spec.redirect_url or DEFAULT_REDIRECT
    scheme, sep, rest = redirect.partition("://")
    host, slash, tail = rest.partition("/")
    path = "/" + tail.split("?", 1)[0]
    if (not sep or not host or not slash or scheme not in ("http", "https", "%REQ(x-forwarded-"
                                                           "proto)%") or "%" in tail
            or "?" in tail or "#" in tail):
        raise Refused(f"oidc redirectURL {quote(redirect)} is not an http(s) URL with a path "
                      "(no query)", f"{where}.redirectURL")
    return redirect, path


def _cookies(spec: OIDCSpec, where: str) -> tuple[tuple[str, str], ...]:
    names = spec.cookie_names
    if names is None:
        return ()
    out = []
    for field_name, value, envoy in (("accessToken", names.access_token, "bearer_token"),
                                     ("idToken", names.id_token, "id_token")):
        if value and not set(value) <= _COOKIE_CHARS:
            raise Refused(f"oidc cookieNames.{field_name} {quote(value)} is not a cookie name",
                          f"{where}.cookieNames.{field_name}")
        if value:
            out.append((envoy, value))
    return tuple(out)


def _token_pool(spec: OIDCSpec, policy: TrafficPolicy, snapshot: Snapshot,
                where: str) -> tuple[PoolSpec, str]:
    assert spec.provider is not None
    ns, at = policy.metadata.namespace, f"{where}.provider.backendRef"
    ref = spec.provider.backend_ref
    if ref is None or not ref.name or ref.port is None:
        raise Refused("oidc provider needs a backendRef (a Service name and port) to reach the "
                      "token endpoint through; Podway does not resolve outside names", at)
    if ref.namespace not in (None, ns):
        raise Refused(f"Service {ref.namespace}/{ref.name} is in another namespace; only the "
                      "policy's own namespace is used", at, unresolved=True)
    service = snapshot.get(Service, ns, ref.name)
    port = find_port(service, number=ref.port, protocol="TCP") if service else None
    if service is None or port is None:
        raise Refused(f"Service {ns}/{ref.name} port {ref.port} not found", at, unresolved=True)
    pool = http_pool(service, port)
    url = urlsplit(spec.provider.token_endpoint)
    if url.scheme == "https" and url.hostname:
        pool = replace(pool, name=f"{pool.name}/tls/{url.hostname}", settings=replace(
            pool.settings, upstream_tls=UpstreamTLS(sni=url.hostname, origin=policy.ref)))
    return pool, f"Service {ns}/{ref.name} port {ref.port}"


def _client_secret(spec: OIDCSpec, policy: TrafficPolicy, snapshot: Snapshot,
                   where: str) -> str:
    ns, at = policy.metadata.namespace, f"{where}.clientSecret"
    ref = spec.client_secret
    if ref is None or not ref.name:
        raise Refused("oidc needs a clientSecret (a Secret with key "
                      f"{quote(SECRET_KEY)})", at)
    if ref.namespace not in (None, ns):
        raise Refused(f"Secret {ref.namespace}/{ref.name} is in another namespace; only the "
                      "policy's own namespace is read", at, unresolved=True)
    secret = snapshot.get(Secret, ns, ref.name)
    if secret is None:
        raise Refused(f"Secret {ns}/{ref.name} not found", at, unresolved=True)
    data = secret.get(SECRET_KEY)
    if not data:
        raise Refused(f"Secret {ns}/{ref.name} has no key {quote(SECRET_KEY)}", at,
                      unresolved=True)
    return data.decode("utf-8", "replace").strip()


def unserved_paths(listeners: Iterable[Listener]) -> Iterator[tuple[ObjectRef, str, str]]:
    """(policy, message, field) for each OIDC policy whose redirect or logout path, on a host
    it guards, is answered by a route without its login (or by none): there the provider's
    redirect cannot complete the login, or logout does not clear the session. Once per policy
    and path."""
    seen: set[tuple[str, str]] = set()
    for item in listeners:
        for vhost in item.virtual_hosts:
            logins = {f.name: f for r in vhost.routes for f in r.filters if isinstance(f, Oidc)}
            for login in logins.values():
                for path, what, where in (
                        (login.redirect_path, "the redirect URL's path", "redirectURL"),
                        (login.logout_path, "the logout path", "logoutPath")):
                    request = Request(host=vhost.hostname, path=path)
                    route = next((r for r in vhost.routes if matches(r.match, request)), None)
                    if (route is not None and login in route.filters) or \
                            (login.name, path) in seen:
                        continue
                    seen.add((login.name, path))
                    ns, _, name = login.name.partition("/")
                    answer = f"route {route.name}, without the login" if route else "no route (404)"
                    yield (ObjectRef("TrafficPolicy", ns, name),
                           f"{what} {path} on {vhost.hostname} is answered by {answer}: make it "
                           "a path of a route this policy covers, or the login cannot complete "
                           "there", f"spec.security.oidc.{where}")
