"""A feature costs only where it is used: the optional HTTP filters are switched off on every
connection manager and on by the routes that configure them (docs/performance.md)."""

from __future__ import annotations

from dataclasses import replace

from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)

from podway.envoy.config.listeners import listener
from podway.envoy.config.routes import route_configuration
from podway.envoy.config.scoped import LOWER_HOST_FILTER, ROUTER_FILTER, rds_form
from podway.ir import (
    CORS,
    Authorization,
    AuthRequest,
    BasicAuth,
    BodyLimit,
    ClientAccess,
    ErrorPages,
    ExtAuth,
    Jwt,
    JwtProvider,
    Listener,
    RateLimit,
)

from .helpers import http_listener, route, vhost

OPTIONAL = {"envoy.filters.http.cors", "envoy.filters.http.local_ratelimit",
            "envoy.filters.http.rbac", "envoy.filters.http.buffer",
            "envoy.filters.http.basic_auth", "podway.ext_authz.http", "podway.ext_authz.grpc",
            "podway.rbac.authorization", "podway.jwt_authn", "podway.lua.auth_request",
            "podway.lua.error_pages"}
# Authentication: would refuse every request when on without a per-route config.
GUARDS = {"envoy.filters.http.basic_auth", "podway.ext_authz.http", "podway.ext_authz.grpc",
          "podway.jwt_authn", "podway.lua.auth_request"}
# The streaming body limit (a body limit too large to buffer): disabled on the manager like the
# others, switched on only by the routes with such a limit (none in this listener).
STREAMING_LIMIT = "envoy.filters.http.lua"


def _manager(item: Listener, *, scoped: bool = False) -> hcm.HttpConnectionManager:
    built = listener(item, scoped=scoped)
    manager = hcm.HttpConnectionManager()
    built.filter_chains[0].filters[0].typed_config.Unpack(manager)
    return manager


def _listener() -> Listener:
    guarded = replace(route("guarded", "/guarded", "p"), filters=(
        CORS(allow_origins=("https://app.test",)), ClientAccess(allow=("10.0.0.0/8",)),
        RateLimit(requests=1, burst=2), BodyLimit(max_bytes=1024),
        BasicAuth(users=(("u", "{SHA}" + "A" * 27 + "="),)), ExtAuth(pool="p"),
        ExtAuth(pool="p", grpc=True), Authorization(),
        Jwt(name="j", providers=(JwtProvider(name="j/p", jwks='{"keys": []}'),)),
        AuthRequest(pool="p", authority="auth", path="/oauth2/auth"),
        ErrorPages(codes=(404,), pool="p")))
    return http_listener(vhost("a.test", guarded, route("plain", "/plain", "p")))


def test_optional_filters_are_switched_off_on_the_manager() -> None:
    """Every filter but the router is present and ``disabled``: a request pays for none of them
    unless its route switches it on."""
    filters = {f.name: f.disabled for f in _manager(_listener()).http_filters}
    assert set(filters) == OPTIONAL | {STREAMING_LIMIT, ROUTER_FILTER}
    assert {name for name, off in filters.items() if off} == OPTIONAL | {STREAMING_LIMIT}


def test_only_the_routes_that_use_a_feature_switch_its_filter_on() -> None:
    """The route with CORS, an allowlist, a rate limit, a body limit, basic auth, JWT and both
    external auths names every filter (a per-route config switches a disabled filter on); the
    plain route names none."""
    table = route_configuration(_listener(), persistence={})
    by_name = {r.name: r for r in table.virtual_hosts[0].routes}
    assert set(by_name["guarded"].typed_per_filter_config) == OPTIONAL
    assert not by_name["plain"].typed_per_filter_config


def test_a_scoped_manager_keeps_them_on_and_its_rds_form_switches_them_off() -> None:
    """Scoped: Envoy picks a request's filters from the route found before the Host is
    lower-cased, so access rules must not hang on that first lookup: the filters stay on (they
    do nothing without a per-route config) — all but authentication, which would then refuse
    every request (a listener using it is never scoped). The one-table form is the unscoped
    manager again."""
    scoped = _manager(_listener(), scoped=True)
    assert scoped.http_filters[0].name == LOWER_HOST_FILTER
    assert {f.name for f in scoped.http_filters if f.disabled} == GUARDS
    back = rds_form(listener(_listener(), scoped=True))
    assert back is not None
    assert back.SerializeToString(deterministic=True) == listener(
        _listener()).SerializeToString(deterministic=True)


def test_jwt_providers_live_in_the_filter_config_not_in_the_listener() -> None:
    """The JWT filter's providers come over ADS (ECDS): a manager names the filter config, so
    a provider changed, added or removed leaves every listener's bytes the same (a changed
    listener drains its connections); the one config holds every route's requirement."""
    from podway.envoy import types
    from podway.envoy.config import build
    from podway.envoy.config.jwt import JWT_FILTER
    from podway.ir import IR

    def ir_with(audience: str) -> IR:
        check = Jwt(name="ns/p", providers=(JwtProvider(name="ns/p/a", audiences=(audience,),
                                                        jwks='{"keys": [{"kty": "oct"}]}'),))
        item = http_listener(vhost("a.test", replace(route("r", "/", "p"), filters=(check,))))
        return IR(listeners=(item,))

    one, two = build(ir_with("shop")), build(ir_with("billing"))
    assert {n: r.digest for n, r in one[types.LISTENER].items()} == {
        n: r.digest for n, r in two[types.LISTENER].items()}
    assert one[types.EXTENSION][JWT_FILTER].digest != two[types.EXTENSION][JWT_FILTER].digest
    manager = _manager(ir_with("shop").listeners[0])
    jwt = next(f for f in manager.http_filters if f.name == JWT_FILTER)
    assert jwt.disabled
    assert jwt.HasField("config_discovery")
    assert not jwt.HasField("typed_config")


def test_an_auth_url_script_quotes_every_value_and_fails_closed() -> None:
    """The auth-url values reach the Lua script only as escaped string literals (a quote, a
    backslash or a newline in a URL cannot end the literal), and the check runs under pcall,
    answering 500 when it fails."""
    from podway.envoy.config.auth_request import script
    from podway.envoy.config.lua import lua_string

    assert lua_string('a"b\\c\nd é') == '"a\\034b\\092c\\010d \\195\\169"'
    code = script(AuthRequest(pool="p", authority="auth", path='/x?"]];os.exit()--',
                              signin="https://login/?rd=$escaped_request_uri"))
    assert 'local PATH = "/x?\\034]];os.exit()--"' in code
    assert "pcall(check, handle)" in code
    assert 'reply = {[":status"] = "500"}' in code


def _routers(item: Listener, **kwargs: bool) -> list[bool]:
    """The router's ``dynamic_stats`` on every manager of ``item`` (each HTTPS chain's too)."""
    from envoy.extensions.filters.http.router.v3 import router_pb2

    out = []
    built = listener(item, **kwargs)
    chains = [*built.filter_chains, *([built.default_filter_chain]
                                      if built.HasField("default_filter_chain") else [])]
    for chain in chains:
        manager = hcm.HttpConnectionManager()
        chain.filters[0].typed_config.Unpack(manager)
        (router,) = [f for f in manager.http_filters if f.name == ROUTER_FILTER]
        config = router_pb2.Router()
        router.typed_config.Unpack(config)
        assert config.HasField("dynamic_stats")  # Envoy's default (on) is never left implied
        out.append(config.dynamic_stats.value)
    return out


def _https_listener() -> Listener:
    from podway.ir import ListenerProtocol, TLSCertificate

    certs = (TLSCertificate(name="secret/a", hostnames=("a.test",), cert_pem="c", key_pem="k"),
             TLSCertificate(name="secret/d", hostnames=(), cert_pem="c", key_pem="k"))
    return Listener(name="listener/https", address="127.0.0.1", port=8443,
                    protocol=ListenerProtocol.HTTPS, certificates=certs,
                    virtual_hosts=(vhost("a.test", route("r", "/", "p")),))


def test_the_router_makes_no_per_pool_stats_unless_every_stat_is_kept() -> None:
    """The per-request per-pool stats (response codes, timings) are refused by the bounded
    stats anyway, after Envoy composed and looked each one up: off by default, on every
    manager (each HTTPS chain's too); on for an Envoy that keeps every stat."""
    assert _routers(_listener()) == [False]
    assert _routers(_https_listener()) == [False, False]
    assert _routers(_listener(), dynamic_stats=True) == [True]
    assert _routers(_https_listener(), dynamic_stats=True) == [True, True]


def test_the_router_adds_no_envoy_headers_unless_every_stat_is_kept() -> None:
    """``x-envoy-upstream-service-time`` to the client, ``x-envoy-expected-rq-timeout-ms``
    and ``x-envoy-original-path`` to the member: none by default, on every manager (each
    HTTPS chain's too); Envoy's headers back in the diagnostic mode (``--envoy-stats
    detailed``). tests/e2e/test_envoy_headers.py checks what a real Envoy sends."""
    from envoy.extensions.filters.http.router.v3 import router_pb2

    def suppressed(item: Listener, **kwargs: bool) -> list[bool]:
        built = listener(item, **kwargs)
        out = []
        for chain in [*built.filter_chains, built.default_filter_chain]:
            if not chain.filters:
                continue
            manager = hcm.HttpConnectionManager()
            chain.filters[0].typed_config.Unpack(manager)
            config = router_pb2.Router()
            manager.http_filters[-1].typed_config.Unpack(config)
            out.append(config.suppress_envoy_headers)
        return out

    assert suppressed(_listener()) == [True]
    assert suppressed(_https_listener()) == [True, True]
    assert suppressed(_listener(), dynamic_stats=True) == [False]
    assert suppressed(_https_listener(), dynamic_stats=True) == [False, False]


def test_the_builder_and_pipeline_pass_the_stats_choice_on() -> None:
    """``podway run --envoy-stats detailed`` (the pipeline's ``detailed_stats``) keeps them;
    the default build does not make them."""
    from envoy.extensions.filters.http.router.v3 import router_pb2

    from podway.envoy.config import Builder
    from podway.envoy.types import LISTENER
    from podway.pipeline import Pipeline
    from podway.translate import TranslateOptions

    from .helpers import ir, pool

    def dynamic(builder: Builder) -> bool:
        built = builder.build(ir((_listener(),), pool("p", 8080)))
        manager = hcm.HttpConnectionManager()
        (resource,) = built[LISTENER].values()
        resource.message.filter_chains[0].filters[0].typed_config.Unpack(manager)
        config = router_pb2.Router()
        manager.http_filters[-1].typed_config.Unpack(config)
        return config.dynamic_stats.value

    assert dynamic(Builder()) is False
    assert dynamic(Builder(dynamic_stats=True)) is True
    options = TranslateOptions(address="127.0.0.1")
    assert dynamic(Pipeline(object(), translate=options)._builder) is False  # type: ignore[arg-type]
    assert dynamic(Pipeline(object(), translate=options,  # type: ignore[arg-type]
                            detailed_stats=True)._builder) is True
