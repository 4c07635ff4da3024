"""JWT authentication (``envoy.filters.http.jwt_authn``) without touching listeners.

Envoy's JWT filter holds its providers (issuers, audiences, key sets) in the filter's own
config, not per route: a route can only name a *requirement* of it (``requirement_name``). Put
in the connection manager, a new or changed provider would change every HTTP listener, and a
changed listener drains its connections. So every manager carries the filter switched off
(``disabled``) with its config found over ADS (ECDS, ``config_discovery``): one resource,
``JWT_FILTER``, holds every provider and requirement of the IR, and a provider added, changed or
removed updates that resource alone — listeners keep their connections. A route with a ``Jwt``
switches the filter on with its per-route config naming its requirement (``per_route``).

The resource always exists (with no provider when no route asks for a token), so a listener
never waits for it, and routes without a ``Jwt`` never run the filter.

Semantics (Envoy's): a request without a token, or with a token that is expired, not yet
valid, badly signed or of another issuer, gets 401 (``WWW-Authenticate: Bearer``); a valid
token whose ``aud`` is not allowed gets 403. The token is not forwarded to the backend; the
named claims are (``claim_headers``). A remote key set is fetched when the config arrives and
again after its cache duration; while it cannot be fetched, tokens of that provider get 401.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from envoy.config.core.v3 import config_source_pb2, extension_pb2, http_uri_pb2
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from google.protobuf import any_pb2, empty_pb2

from podway.envoy.config.common import ads_source, duration, pack
from podway.envoy.config.resource import Resource
from podway.ir import IR, IRChange, Jwt, JwtProvider, Listener, VirtualHost

JWT_FILTER = "podway.jwt_authn"
# Where the filter keeps a valid token's payload (under the provider's name): Envoy names the
# metadata after the extension, whatever the filter's own name.
METADATA_NAMESPACE = "envoy.filters.http.jwt_authn"
_TYPE = "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication"
_FETCH_TIMEOUT_MS = 5000


def manager_filter() -> hcm.HttpFilter:
    """The switched-off JWT filter of every manager, its config from ADS (``JWT_FILTER``)."""
    source = config_source_pb2.ExtensionConfigSource(config_source=ads_source(),
                                                     type_urls=[_TYPE])
    return hcm.HttpFilter(name=JWT_FILTER, disabled=True, config_discovery=source)


def per_route(f: Jwt) -> any_pb2.Any:
    """The per-route config that switches the filter on with ``f``'s requirement."""
    return pack(jwt_pb2.PerRouteConfig(requirement_name=f.name))


def resource(checks: Iterable[Jwt]) -> Resource:
    """The one ECDS resource: every provider and requirement of ``checks`` (sorted: the same
    set gives the same bytes, so the cache sees no change)."""
    config = jwt_pb2.JwtAuthentication(stat_prefix="podway_jwt")
    for check in sorted(set(checks), key=lambda c: c.name):
        for p in check.providers:
            if p.name not in config.providers:
                config.providers[p.name].CopyFrom(_provider(p))
        config.requirement_map[check.name].CopyFrom(_requirement(check))
    return Resource.of(JWT_FILTER, extension_pb2.TypedExtensionConfig(
        name=JWT_FILTER, typed_config=pack(config)))


def _requirement(check: Jwt) -> jwt_pb2.JwtRequirement:
    each = [jwt_pb2.JwtRequirement(provider_name=p.name) for p in check.providers]
    if check.optional:
        each.append(jwt_pb2.JwtRequirement(allow_missing=empty_pb2.Empty()))
    if len(each) == 1:
        return each[0]
    return jwt_pb2.JwtRequirement(requires_any=jwt_pb2.JwtRequirementOrList(requirements=each))


_BEARER_ONLY = (("authorization", "Bearer "),)


def _provider(p: JwtProvider) -> jwt_pb2.JwtProvider:
    # The payload of a valid token is kept for an authorization by its claims (``access``).
    out = jwt_pb2.JwtProvider(issuer=p.issuer, audiences=p.audiences, forward=False,
                              payload_in_metadata=p.name)
    if p.jwks:
        out.local_jwks.inline_string = p.jwks
    else:
        remote = out.remote_jwks
        remote.http_uri.CopyFrom(http_uri_pb2.HttpUri(uri=p.jwks_uri, cluster=p.jwks_pool,
                                                      timeout=duration(_FETCH_TIMEOUT_MS)))
        remote.cache_duration.CopyFrom(duration(p.jwks_cache_s * 1000))
        remote.async_fetch.fast_listener = True
    for claim, header in p.claim_headers:
        out.claim_to_headers.add(header_name=header, claim_name=claim)
    # Without ``extractFrom`` the token is taken from ``Authorization: Bearer`` only: named
    # here, because Envoy's own default also reads an ``access_token`` query parameter (a
    # token in a URL ends up in logs and Referer headers; docs/security.md).
    named = p.from_headers or p.from_cookies or p.from_params
    for header, prefix in p.from_headers if named else _BEARER_ONLY:
        out.from_headers.add(name=header, value_prefix=prefix)
    out.from_cookies.extend(p.from_cookies)
    out.from_params.extend(p.from_params)
    out.clear_route_cache = p.recompute_route
    return out


class Checks:
    """The ECDS resource of an IR, kept in O(change): per HTTP listener, how many routes use
    each ``Jwt``, edited by a patch's virtual-host pairs; a listener that is the very same
    object as last time is not looked at."""

    def __init__(self) -> None:
        self._by_listener: dict[str, tuple[Listener, Counter[Jwt]]] = {}
        self._made: tuple[frozenset[Jwt], Resource] | None = None

    def resource(self, ir: IR, patch: IRChange | None) -> Resource:
        kept: dict[str, tuple[Listener, Counter[Jwt]]] = {}
        for item in ir.listeners:
            if not item.virtual_hosts:
                continue
            old = self._by_listener.get(item.name)
            if old is not None and old[0] is item:
                kept[item.name] = old
                continue
            pairs = patch.vhosts.get(item.name) if patch is not None else None
            if old is not None and pairs is not None:
                count = Counter(old[1])
                for before, after in pairs:
                    count.subtract(_of(before))
                    count.update(_of(after))
                kept[item.name] = (item, +count)
            else:
                kept[item.name] = (item, Counter(j for v in item.virtual_hosts for j in _of(v)))
        self._by_listener = kept
        checks = frozenset(j for _, count in kept.values() for j in count)
        if self._made is None or self._made[0] != checks:
            self._made = (checks, resource(checks))
        return self._made[1]


def _of(vhost: VirtualHost | None) -> list[Jwt]:
    if vhost is None:
        return []
    return [f for r in vhost.routes for f in r.filters if isinstance(f, Jwt)]
