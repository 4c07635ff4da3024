"""A TrafficPolicy's ``security.jwt``: the IR's ``Jwt`` (Envoy Gateway's SecurityPolicy jwt
semantics, in part). Pure.

Each provider needs a ``name`` (unique in the policy), and a key set: ``localJWKS`` (``Inline``
JSON, or ``ValueRef`` to a ConfigMap or Secret of the policy's namespace, key ``jwks.json``) or
``remoteJWKS`` (an ``http``/``https`` ``uri`` fetched through ``backendRef``, a Service port of
the policy's namespace; ``https`` is verified against the engine host's trust store with the
URI's host as SNI and name). ``claimToHeaders`` copy claims of a valid token to request
headers; ``extractFrom`` looks for the token in headers, cookies or query parameters instead of
``Authorization: Bearer``; ``recomputeRoute`` chooses the route again after that. Anything
else — no provider, a key set that is not JSON with ``keys``, a missing reference, a remote
URI without a backendRef (Podway does not resolve outside names) — refuses the policy's
routes (``security.Found.refuse``): never served open.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from podway.ir import Jwt, JwtProvider, UpstreamTLS
from podway.model import Secret, Service
from podway.model.core import ConfigMap
from podway.model.policy import JWTProvider, TrafficPolicy
from podway.model.snapshot import Snapshot
from podway.translate.core.problems import quote
from podway.translate.pools import traffic_values as tv
from podway.translate.pools.backends import PoolSpec, find_port, http_pool

JWKS_KEY = "jwks.json"
DEFAULT_CACHE_S = 300


class Refused(Exception):
    """Why the jwt section cannot be served: (message, field, resolved) — ``resolved`` False
    when a reference did not resolve (ResolvedRefs=False), else the section is invalid."""

    def __init__(self, message: str, where: str, *, unresolved: bool = False) -> None:
        super().__init__(message)
        self.where = where
        self.unresolved = unresolved


def jwt(policy: TrafficPolicy, snapshot: Snapshot) -> tuple[Jwt, list[PoolSpec], list[str]]:
    """The policy's ``Jwt``, the pools its remote key sets are fetched through, and what its
    references resolved to (for ResolvedRefs). Raises ``Refused``."""
    spec = policy.spec.security.jwt if policy.spec.security else None
    assert spec is not None
    ns, name = policy.metadata.namespace, policy.metadata.name
    where = "spec.security.jwt.providers"
    if not spec.providers:
        raise Refused("jwt needs at least one provider", where)
    providers, pools, found = [], [], []
    seen: set[str] = set()
    for i, given in enumerate(spec.providers):
        at = f"{where}[{i}]"
        if not given.name or given.name in seen:
            raise Refused(f"providers[{i}] needs a name of its own", at)
        seen.add(given.name)
        provider = JwtProvider(name=f"{ns}/{name}/{given.name}", issuer=given.issuer,
                               audiences=given.audiences,
                               claim_headers=_claims(given, at),
                               recompute_route=given.recompute_route, **_locations(given, at))
        if (given.local_jwks is None) == (given.remote_jwks is None):
            raise Refused(f"providers[{i}] needs one of localJWKS and remoteJWKS", at)
        if given.local_jwks is not None:
            text, source = _local(given, policy, snapshot, at)
            provider = replace(provider, jwks=text)
        else:
            provider, pool, source = _remote(provider, given, policy, snapshot, at)
            pools.append(pool)
        found.append(source)
        providers.append(provider)
    return (Jwt(name=f"{ns}/{name}", providers=tuple(providers), optional=spec.optional,
                source=f"TrafficPolicy {ns}/{name}"), pools, found)


def _claims(given: JWTProvider, at: str) -> tuple[tuple[str, str], ...]:
    out = []
    for j, c in enumerate(given.claim_to_headers):
        if not c.claim or not c.header or not all(ch.isalnum() or ch in "-_" for ch in c.header):
            raise Refused(f"claimToHeaders[{j}] needs a claim and a header name",
                          f"{at}.claimToHeaders[{j}]")
        out.append((c.claim, c.header.lower()))
    return tuple(out)


_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _locations(given: JWTProvider, at: str) -> dict[str, Any]:
    """``extractFrom``: where the token is looked for (headers, cookies, query parameters)."""
    where = given.extract_from
    if where is None:
        return {}
    names = [h.name for h in where.headers] + list(where.cookies) + list(where.params)
    if not names or not all(n and set(n) <= _TOKEN_CHARS for n in names):
        raise Refused("extractFrom needs headers, cookies or params, each a plain name",
                      f"{at}.extractFrom")
    return {"from_headers": tuple((h.name.lower(), h.value_prefix) for h in where.headers),
            "from_cookies": where.cookies, "from_params": where.params}


def _local(given: JWTProvider, policy: TrafficPolicy, snapshot: Snapshot,
           at: str) -> tuple[str, str]:
    """The key set's JSON and where it came from."""
    local = given.local_jwks
    assert local is not None
    ns, where = policy.metadata.namespace, f"{at}.localJWKS"
    if local.type == "Inline":
        text, source = local.inline or "", "the inline key set"
    elif local.type == "ValueRef" and local.value_ref is not None and local.value_ref.name:
        ref = local.value_ref
        if ref.kind not in ("ConfigMap", "Secret") or ref.group not in ("", "core"):
            raise Refused(f"localJWKS.valueRef kind {quote(ref.kind)} is neither ConfigMap "
                          "nor Secret", where)
        obj = snapshot.get(ConfigMap if ref.kind == "ConfigMap" else Secret, ns, ref.name)
        if obj is None:
            raise Refused(f"{ref.kind} {ns}/{ref.name} not found", where, unresolved=True)
        value = obj.data.get(JWKS_KEY) if isinstance(obj, ConfigMap) \
            else _secret_text(obj) if isinstance(obj, Secret) else None
        if value is None:
            raise Refused(f"{ref.kind} {ns}/{ref.name} has no key {quote(JWKS_KEY)}", where,
                          unresolved=True)
        text, source = value, f"{ref.kind} {ns}/{ref.name}"
    else:
        raise Refused("localJWKS needs type Inline with inline, or ValueRef with valueRef",
                      where)
    try:
        keys = json.loads(text).get("keys")
    except (ValueError, AttributeError):
        keys = None
    if not isinstance(keys, list) or not keys:
        raise Refused(f"{source} is not a JWKS (JSON with a list 'keys')", where)
    return text, source


def _secret_text(secret: Secret) -> str | None:
    data = secret.get(JWKS_KEY)
    return None if data is None else data.decode("utf-8", "replace")


def _remote(provider: JwtProvider, given: JWTProvider, policy: TrafficPolicy,
            snapshot: Snapshot, at: str) -> tuple[JwtProvider, PoolSpec, str]:
    remote = given.remote_jwks
    assert remote is not None
    ns, where = policy.metadata.namespace, f"{at}.remoteJWKS"
    url = urlsplit(remote.uri)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise Refused(f"remoteJWKS.uri {quote(remote.uri)} is not an http(s) URL", where)
    ref = remote.backend_ref
    if ref is None or not ref.name or ref.port is None:
        raise Refused("remoteJWKS needs a backendRef (a Service name and port) to fetch the "
                      "key set through; Podway does not resolve outside names", where)
    if ref.namespace not in (None, ns):
        raise Refused(f"Service {ref.namespace}/{ref.name} is in another namespace; only the "
                      "policy's own namespace is used", where, unresolved=True)
    issues = tv.Issues()
    cache = tv.duration_ms(remote.cache_duration, where=f"{where}.cacheDuration",
                           issues=issues) if remote.cache_duration else DEFAULT_CACHE_S * 1000
    if cache is None or cache < 1000:
        raise Refused("remoteJWKS.cacheDuration is not a duration of 1s or more", where)
    service = snapshot.get(Service, ns, ref.name)
    port = find_port(service, number=ref.port, protocol="TCP") if service else None
    if service is None or port is None:
        raise Refused(f"Service {ns}/{ref.name} port {ref.port} not found", where,
                      unresolved=True)
    pool = http_pool(service, port)
    if url.scheme == "https":
        pool = replace(pool, name=f"{pool.name}/tls/{url.hostname}", settings=replace(
            pool.settings, upstream_tls=UpstreamTLS(sni=url.hostname, origin=policy.ref)))
    return (replace(provider, jwks_uri=remote.uri, jwks_pool=pool.name,
                    jwks_cache_s=cache // 1000), pool,
            f"Service {ns}/{ref.name} port {ref.port}")
