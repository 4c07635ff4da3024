"""Per-route client access, rate limits and body limits: HTTP filters every manager carries,
switched off (``disabled``) and switched on only by the routes that configure them.

* ``ClientAccess`` → RBAC (``envoy.filters.http.rbac``): allow the ``allow`` CIDRs (any when
  empty) unless in ``deny``, matched on the client address after trusted X-Forwarded-For hops
  (``remote_ip``); anyone else gets 403.
* ``RateLimit`` → local rate limit (``envoy.filters.http.local_ratelimit``): with
  ``per_client``, one token bucket per client address (a dynamic descriptor keyed on
  ``remote_address``, at most ``MAX_CLIENT_BUCKETS`` held, least recently used dropped);
  otherwise one bucket for the route. Each engine counts on its own.
* ``AuthRequest`` → ingress-nginx's ``auth-url`` as a Lua subrequest
  (``podway.envoy.config.auth_request``).
* ``ErrorPages`` → ingress-nginx's ``custom-http-errors`` as a Lua response hook
  (``podway.envoy.config.error_pages``).
* ``Jwt`` → JWT authentication, its providers found over ADS (``podway.envoy.config.jwt``).
* ``Oidc`` → OpenID Connect login, one filter per policy, carried only by the managers whose
  routes use it (``podway.envoy.config.oauth2``).
* ``Authorization`` → RBAC of its own after the JWT filter, so that a rule can match the valid
  token's claims (the JWT filter's dynamic metadata).
* ``BasicAuth`` → basic auth (``envoy.filters.http.basic_auth``): the route's users as an
  htpasswd list of ``{SHA}`` hashes (per-route ``users``); anyone else gets 401. Never switched
  on in a scoped manager (``scoped``): its manager-level list names nobody.
* ``BodyLimit`` → bodies over the limit get 413, with bounded memory. Up to
  ``MAX_BUFFERED_BODY`` the body is read whole first (buffer, ``envoy.filters.http.buffer``),
  as nginx does. Above it (nginx allows up to 4 GiB) nothing is held whole: a Lua check
  (``envoy.filters.http.lua``) answers 413 at once when ``Content-Length`` is over the limit
  and lets a declared body stream (the codec stops a body longer than its length); a body of
  undeclared length (chunked) is buffered up to ``MAX_BUFFERED_BODY`` (the route's body buffer
  limit) and answered 413 beyond it — fail closed: send ``Content-Length`` for larger ones.

A feature costs only where it is used: each optional filter is on every manager, in nginx's
phase order — CORS preflights first, then rate limits, then access (client addresses, then
credentials), then the body — but with
``disabled: true``, so Envoy does not even create it for a request whose route does not name it;
a route's ``typed_per_filter_config`` entry for the filter switches it on for that route (Envoy:
a per-route config of a disabled filter enables it). Present rather than absent so that a route
gaining a setting never replaces its listener (which would drain its connections). Measured
(docs/performance.md, "What each default costs" and "Edge auth's four disabled filters"): an
enabled idle filter costs every request several per cent; a disabled one costs nothing
measurable (a manager with none, these nine or fifty measured alike), so carrying only the
filters a listener's routes use would buy nothing and cost a drain when the first route gains
one.
"""

from __future__ import annotations

from collections.abc import Iterable
from ipaddress import ip_network

from envoy.config.core.v3 import (
    address_pb2,
    base_pb2,
    config_source_pb2,
    grpc_service_pb2,
    http_uri_pb2,
)
from envoy.config.rbac.v3 import rbac_pb2 as rbac_config
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.extensions.filters.http.basic_auth.v3 import basic_auth_pb2
from envoy.extensions.filters.http.buffer.v3 import buffer_pb2
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from envoy.type.matcher.v3 import metadata_pb2, string_pb2, value_pb2
from envoy.type.v3 import token_bucket_pb2
from google.protobuf import any_pb2, wrappers_pb2

from podway.envoy.config import auth_request, error_pages, jwt, oauth2
from podway.envoy.config.common import duration, pack
from podway.ir import (
    AccessRule,
    Authorization,
    AuthRequest,
    BasicAuth,
    BodyLimit,
    ClaimRule,
    ClientAccess,
    ErrorPages,
    ExtAuth,
    Filter,
    Jwt,
    Oidc,
    RateLimit,
)

RBAC_FILTER = "envoy.filters.http.rbac"
BASIC_AUTH_FILTER = "envoy.filters.http.basic_auth"
# A TrafficPolicy's authorization rules: an RBAC of their own (an Ingress allowlist may sit on
# the same route); with no per-route config it allows everything, like the first.
AUTHORIZATION_FILTER = "podway.rbac.authorization"
# Two ext_authz filters: Envoy builds a filter's client (HTTP or gRPC) from its own config, so a
# route can switch the server but not the protocol.
EXT_AUTHZ_HTTP_FILTER = "podway.ext_authz.http"
EXT_AUTHZ_GRPC_FILTER = "podway.ext_authz.grpc"
_NO_CLUSTER = "podway-no-auth-server"  # the managers' placeholder; routes name their own
# Any header name but ``host`` and pseudo-headers (RE2 has no look-ahead): the answer's headers
# an ExtAuth without ``response_headers`` copies to the request.
_NOT_HOST = "^(?:[^h:].*|h|h[^o].*|ho|ho[^s].*|hos|hos[^t].*|host.+)$"
RATE_LIMIT_FILTER = "envoy.filters.http.local_ratelimit"
BUFFER_FILTER = "envoy.filters.http.buffer"
LUA_FILTER = "envoy.filters.http.lua"
# The most of one request body an engine holds in memory for a body limit (per request).
MAX_BUFFERED_BODY = 8 * 1024 * 1024
MAX_CLIENT_BUCKETS = 10_000  # per route and engine: memory stays bounded under many clients
_CLIENT_KEY = "remote_address"
# The manager-level user list of the disabled basic auth filter (Envoy wants one): never used,
# since only a route's own list switches the filter on; no password hashes to this digest.
_NOBODY = "podway-nobody:{SHA}AAAAAAAAAAAAAAAAAAAAAAAAAAA="


def manager_filters(logins: Iterable[Oidc] = ()) -> list[hcm.HttpFilter]:
    """The switched-off filters every HTTP connection manager carries (after CORS, before the
    router), and those of the OIDC policies of its routes (``logins``: only where used); a
    route's per-route config switches one on (``access_filters``). A policy's authorization
    comes after the JWT filter: its rules may read the valid token's claims."""
    return [
        hcm.HttpFilter(name=RATE_LIMIT_FILTER, disabled=True, typed_config=pack(
            local_rate_limit_pb2.LocalRateLimit(stat_prefix="http_local_rate_limit"))),
        hcm.HttpFilter(name=RBAC_FILTER, disabled=True, typed_config=pack(rbac_pb2.RBAC())),
        *oauth2.manager_filters(logins),
        jwt.manager_filter(),
        hcm.HttpFilter(name=AUTHORIZATION_FILTER, disabled=True,
                       typed_config=pack(rbac_pb2.RBAC())),
        hcm.HttpFilter(name=BASIC_AUTH_FILTER, disabled=True, typed_config=pack(
            basic_auth_pb2.BasicAuth(users=base_pb2.DataSource(inline_string=_NOBODY)))),
        hcm.HttpFilter(name=EXT_AUTHZ_HTTP_FILTER, disabled=True, typed_config=pack(
            _ext_authz(grpc=False))),
        hcm.HttpFilter(name=EXT_AUTHZ_GRPC_FILTER, disabled=True, typed_config=pack(
            _ext_authz(grpc=True))),
        auth_request.manager_filter(),
        error_pages.manager_filter(),
        hcm.HttpFilter(name=BUFFER_FILTER, disabled=True, typed_config=pack(
            buffer_pb2.Buffer(max_request_bytes=_wrap(1)))),
        hcm.HttpFilter(name=LUA_FILTER, disabled=True, typed_config=pack(lua_pb2.Lua())),
    ]


def access_filters(filters: Iterable[Filter]) -> list[tuple[str, any_pb2.Any]]:
    """(filter name, per-route config) for a route's access, rate and body limits."""
    out: list[tuple[str, any_pb2.Any]] = []
    for f in filters:
        if isinstance(f, ClientAccess):
            out.append((RBAC_FILTER, pack(rbac_pb2.RBACPerRoute(rbac=_rbac(f)))))
        elif isinstance(f, RateLimit):
            out.append((RATE_LIMIT_FILTER, pack(_rate_limit(f))))
        elif isinstance(f, Authorization):
            out.append((AUTHORIZATION_FILTER, pack(rbac_pb2.RBACPerRoute(
                rbac=rbac_pb2.RBAC(rules=_authorization(f))))))
        elif isinstance(f, ExtAuth):
            out.append((EXT_AUTHZ_GRPC_FILTER if f.grpc else EXT_AUTHZ_HTTP_FILTER,
                        pack(_ext_authz_route(f))))
        elif isinstance(f, Jwt):
            out.append((jwt.JWT_FILTER, jwt.per_route(f)))
        elif isinstance(f, Oidc):
            out.append((oauth2.filter_name(f), oauth2.per_route()))
        elif isinstance(f, AuthRequest):
            out.append((auth_request.AUTH_REQUEST_FILTER, auth_request.per_route(f)))
        elif isinstance(f, ErrorPages):
            out.append((error_pages.ERROR_PAGES_FILTER, error_pages.per_route(f)))
        elif isinstance(f, BasicAuth):
            users = "\n".join(f"{name}:{digest}" for name, digest in f.users)
            out.append((BASIC_AUTH_FILTER, pack(basic_auth_pb2.BasicAuthPerRoute(
                users=base_pb2.DataSource(inline_string=users)))))
        elif isinstance(f, BodyLimit) and f.max_bytes <= MAX_BUFFERED_BODY:
            per_route = buffer_pb2.BufferPerRoute(
                buffer=buffer_pb2.Buffer(max_request_bytes=_wrap(f.max_bytes)))
            out.append((BUFFER_FILTER, pack(rc.FilterConfig(config=pack(per_route)))))
        elif isinstance(f, BodyLimit):
            code = lua_pb2.LuaPerRoute(source_code=base_pb2.DataSource(
                inline_string=_streaming_limit(f.max_bytes)))
            out.append((LUA_FILTER, pack(rc.FilterConfig(config=pack(code)))))
    return out


def _match(rule: AccessRule) -> rbac_config.Principal:
    """A principal matching exactly the requests ``rule`` matches."""
    parts: list[rbac_config.Principal] = []
    if rule.cidrs:
        parts.append(_ranges(rule.cidrs))
    for name, values in rule.headers:
        parts.append(rbac_config.Principal(or_ids=rbac_config.Principal.Set(ids=[
            rbac_config.Principal(header=rc.HeaderMatcher(
                name=name, string_match={"exact": v})) for v in values])))
    if rule.methods:
        parts.append(rbac_config.Principal(or_ids=rbac_config.Principal.Set(ids=[
            rbac_config.Principal(header=rc.HeaderMatcher(
                name=":method", string_match={"exact": m})) for m in rule.methods])))
    parts.extend(_claim(c) for c in rule.claims)
    if not parts:
        return rbac_config.Principal(any=True)
    return rbac_config.Principal(and_ids=rbac_config.Principal.Set(ids=parts))


def _claim(claim: ClaimRule) -> rbac_config.Principal:
    """The valid token's claim, read from the payload the JWT filter keeps in the request's
    dynamic metadata (under the provider's name, ``jwt.payload_in_metadata``): one of the
    values (a list claim: holding one of them). No valid token of that provider: no match."""
    path = [metadata_pb2.MetadataMatcher.PathSegment(key=k)
            for k in (claim.provider, *claim.claim)]
    ids = []
    for v in claim.values:
        value = value_pb2.ValueMatcher(string_match=string_pb2.StringMatcher(exact=v))
        if claim.array:
            value = value_pb2.ValueMatcher(list_match=value_pb2.ListMatcher(one_of=value))
        ids.append(rbac_config.Principal(metadata=metadata_pb2.MetadataMatcher(
            filter=jwt.METADATA_NAMESPACE, path=path, value=value)))
    return rbac_config.Principal(or_ids=rbac_config.Principal.Set(ids=ids))


def _authorization(f: Authorization) -> rbac_config.RBAC:
    """First match decides, as one ALLOW set: allowed when an Allow rule matches and no earlier
    rule does, or (``default_allow``) when no rule matches; nothing allowed: every request
    is refused (an ALLOW RBAC without policies)."""
    policies: dict[str, rbac_config.Policy] = {}
    earlier: list[rbac_config.Principal] = []

    def allow(name: str, match: rbac_config.Principal | None) -> None:
        ids = [rbac_config.Principal(not_id=p) for p in earlier]
        if match is not None:
            ids.append(match)
        principal = (rbac_config.Principal(and_ids=rbac_config.Principal.Set(ids=ids)) if ids
                     else rbac_config.Principal(any=True))
        policies[name] = rbac_config.Policy(permissions=[rbac_config.Permission(any=True)],
                                            principals=[principal])

    for i, rule in enumerate(f.rules):
        match = _match(rule)
        if rule.allow:
            allow(f"rule-{i}", match)
        earlier.append(match)
    if f.default_allow:
        allow("default", None)
    return rbac_config.RBAC(action=rbac_config.RBAC.ALLOW, policies=policies)


def _ext_authz(*, grpc: bool) -> ext_authz_pb2.ExtAuthz:
    """A manager's ext_authz: fail closed (an error or timeout is 403), V3 protocol; its
    server is a placeholder every route that switches it on replaces."""
    out = ext_authz_pb2.ExtAuthz(transport_api_version=config_source_pb2.V3,
                                 failure_mode_allow=False)
    if grpc:
        out.grpc_service.envoy_grpc.cluster_name = _NO_CLUSTER
    else:
        out.http_service.server_uri.CopyFrom(http_uri_pb2.HttpUri(
            uri=f"http://{_NO_CLUSTER}", cluster=_NO_CLUSTER, timeout=duration(1000)))
    return out


def _ext_authz_route(f: ExtAuth) -> ext_authz_pb2.ExtAuthzPerRoute:
    settings = ext_authz_pb2.CheckSettings()
    if f.body_bytes:
        settings.with_request_body.max_request_bytes = f.body_bytes
        settings.with_request_body.allow_partial_message = True
    if f.grpc:
        settings.grpc_service.CopyFrom(grpc_service_pb2.GrpcService(
            envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=f.pool),
            timeout=duration(f.timeout_ms)))
    else:
        service = settings.http_service
        service.server_uri.CopyFrom(http_uri_pb2.HttpUri(uri=f"http://{f.pool}", cluster=f.pool,
                                                         timeout=duration(f.timeout_ms)))
        service.path_prefix = f.path_prefix
        for name in f.response_headers:
            service.authorization_response.allowed_upstream_headers.patterns.add(
                exact=name.lower(), ignore_case=True)
        if not f.response_headers:  # every header of the answer but the Host
            service.authorization_response.allowed_upstream_headers.patterns.add(
                safe_regex={"regex": _NOT_HOST})
    return ext_authz_pb2.ExtAuthzPerRoute(check_settings=settings)


def body_buffer_limit(filters: Iterable[Filter]) -> int | None:
    """The route's body buffer limit for a streamed body limit (``MAX_BUFFERED_BODY``: the
    most of a body of undeclared length held before 413), or None."""
    if any(isinstance(f, BodyLimit) and f.max_bytes > MAX_BUFFERED_BODY for f in filters):
        return MAX_BUFFERED_BODY
    return None


def _streaming_limit(max_bytes: int) -> str:
    """The Lua check of a body limit too large to buffer: a declared length over the limit is
    413 at once, a declared one within it streams, an undeclared one is read (bounded by the
    route's body buffer limit, 413 past it)."""
    return f"""-- podway: body limit {max_bytes} bytes (streamed)
function envoy_on_request(handle)
  local length = handle:headers():get("content-length")
  if length ~= nil then
    local n = tonumber(length)
    if n == nil or n > {max_bytes} then
      handle:respond({{[":status"] = "413"}}, "request body too large")
    end
    return
  end
  local body = handle:body()  -- nil at once when the request has no body
  if body ~= nil and body:length() > {max_bytes} then
    handle:respond({{[":status"] = "413"}}, "request body too large")
  end
end
"""


def _wrap(value: int) -> wrappers_pb2.UInt32Value:
    return wrappers_pb2.UInt32Value(value=value)


def _cidr(text: str) -> address_pb2.CidrRange:
    net = ip_network(text, strict=False)
    return address_pb2.CidrRange(address_prefix=str(net.network_address),
                                 prefix_len=_wrap(net.prefixlen))


def _ranges(cidrs: tuple[str, ...]) -> rbac_config.Principal:
    return rbac_config.Principal(or_ids=rbac_config.Principal.Set(ids=[
        rbac_config.Principal(remote_ip=_cidr(c)) for c in cidrs]))


def _rbac(access: ClientAccess) -> rbac_pb2.RBAC:
    """ALLOW rules: (in ``allow``, or anyone when empty) and not in ``deny``."""
    parts: list[rbac_config.Principal] = []
    parts.append(_ranges(access.allow) if access.allow else rbac_config.Principal(any=True))
    if access.deny:
        parts.append(rbac_config.Principal(not_id=_ranges(access.deny)))
    policy = rbac_config.Policy(
        permissions=[rbac_config.Permission(any=True)],
        principals=[rbac_config.Principal(and_ids=rbac_config.Principal.Set(ids=parts))])
    rules = rbac_config.RBAC(action=rbac_config.RBAC.ALLOW, policies={"client-access": policy})
    return rbac_pb2.RBAC(rules=rules)


def _bucket(limit: RateLimit) -> token_bucket_pb2.TokenBucket:
    return token_bucket_pb2.TokenBucket(
        max_tokens=limit.burst, tokens_per_fill=_wrap(limit.requests),
        fill_interval=duration(limit.interval_ms))


def _rate_limit(limit: RateLimit) -> local_rate_limit_pb2.LocalRateLimit:
    out = local_rate_limit_pb2.LocalRateLimit(stat_prefix="http_local_rate_limit")
    out.status.code = limit.status  # HTTP status codes are the enum values
    for fraction in (out.filter_enabled, out.filter_enforced):
        fraction.runtime_key = "podway_rate_limit"
        fraction.default_value.numerator = 100
    if limit.per_client:
        # Every request gets a bucket of its own client address; the route-wide bucket is
        # large enough never to refuse anything on its own.
        out.token_bucket.CopyFrom(token_bucket_pb2.TokenBucket(
            max_tokens=1_000_000_000, tokens_per_fill=_wrap(1_000_000_000),
            fill_interval=duration(1000)))
        descriptor = ratelimit_pb2.LocalRateLimitDescriptor(
            entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=_CLIENT_KEY)],
            token_bucket=_bucket(limit))
        out.descriptors.append(descriptor)
        out.max_dynamic_descriptors.value = MAX_CLIENT_BUCKETS
        action = rc.RateLimit.Action(remote_address=rc.RateLimit.Action.RemoteAddress())
        out.rate_limits.append(rc.RateLimit(actions=[action]))
    else:
        out.token_bucket.CopyFrom(_bucket(limit))
    return out
