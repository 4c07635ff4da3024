"""Route translation details that Envoy's defaults would get wrong for Kubernetes."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)

from podway.envoy.config.clusters import MAX_RETRIES, cluster
from podway.envoy.config.listeners import listener as listener_resource
from podway.envoy.config.route_entries import RETRY_ON
from podway.envoy.config.routes import route_configuration, route_configurations
from podway.ir import (
    Forward,
    Listener,
    PathKind,
    PathMatch,
    Persistence,
    PersistenceKind,
    PoolSettings,
    Redirect,
    RetryOn,
    RetryPolicy,
    Route,
    RouteMatch,
    TLSCertificate,
    URLRewrite,
    WeightedPool,
    WildcardMode,
)
from podway.ir import ListenerProtocol as Protocol

from .helpers import ORIGIN, http_listener, route, vhost


def _routes(*vhosts):  # type: ignore[no-untyped-def]
    return route_configuration(http_listener(*vhosts), persistence={})


def test_prefix_is_element_wise_and_root_is_plain_prefix() -> None:
    """PREFIX /foo/ becomes path_separated_prefix /foo; PREFIX / stays prefix /."""
    config = _routes(vhost("a.com", route("r1", "/foo/", "p"), route("r2", "/", "p")))
    first, second = config.virtual_hosts[0].routes
    assert first.match.path_separated_prefix == "/foo"
    assert second.match.prefix == "/"


def test_exact_and_regex_paths() -> None:
    """EXACT maps to path, REGEX to safe_regex."""
    config = _routes(vhost("a.com", route("r1", "/x", "p", kind=PathKind.EXACT),
                           route("r2", "/y.*", "p", kind=PathKind.REGEX)))
    first, second = config.virtual_hosts[0].routes
    assert first.match.path == "/x"
    assert second.match.safe_regex.regex == "/y.*"


def test_one_label_wildcard_requires_one_label_and_falls_back_to_catch_all() -> None:
    """*.foo.com (Ingress) matches a.foo.com only; deeper hosts get the catch-all's routes."""
    config = _routes(vhost("*.foo.com", route("wild", "/", "p1")),
                     vhost("*", route("default", "/", "p2")))
    wild = config.virtual_hosts[0]
    assert list(wild.domains) == ["*.foo.com"]
    assert [r.name for r in wild.routes] == ["wild", "default"]
    regex = wild.routes[0].match.headers[0].string_match.safe_regex.regex
    assert wild.routes[0].match.headers[0].name == ":authority"
    assert re.search(regex, "a.foo.com")
    assert re.search(regex, "A.Foo.com:8080")
    assert not re.search(regex, "a.b.foo.com")
    assert not re.search(regex, "foo.com")
    assert not wild.routes[1].match.headers  # the fallback is unrestricted


def test_suffix_wildcard_has_no_authority_restriction() -> None:
    """Gateway API wildcards cover any number of labels, which is Envoy's own behaviour."""
    config = _routes(vhost("*.foo.com", route("wild", "/", "p1"), wildcard=WildcardMode.SUFFIX))
    assert not config.virtual_hosts[0].routes[0].match.headers


def test_status_share_becomes_a_fractional_direct_response_route() -> None:
    """A share without a pool answers its status for its fraction; the rest forwards."""
    shares = (WeightedPool(pool="p1", weight=3), WeightedPool(pool=None, weight=1, status=500))
    config = _routes(vhost("a.com", route("r", "/", None, shares=shares)))
    status, forward = config.virtual_hosts[0].routes
    assert status.direct_response.status == 500
    assert status.match.runtime_fraction.default_value.numerator == 250_000
    assert forward.route.cluster == "p1"
    assert not forward.match.HasField("runtime_fraction")


def test_all_shares_without_pool_answer_directly() -> None:
    """Only status shares: the last one is unconditional, so every request gets an answer."""
    shares = (WeightedPool(pool=None, weight=1, status=500),)
    config = _routes(vhost("a.com", route("r", "/", None, shares=shares)))
    (only,) = config.virtual_hosts[0].routes
    assert only.direct_response.status == 500
    assert not only.match.HasField("runtime_fraction")


def test_weighted_pools_and_duplicate_domains() -> None:
    """Several pools become weighted clusters; a duplicate domain keeps its first vhost."""
    shares = (WeightedPool(pool="p1", weight=1), WeightedPool(pool="p2", weight=2))
    config = _routes(vhost("a.com", route("r", "/", None, shares=shares)),
                     vhost("a.com", route("dup", "/", "p3")))
    assert len(config.virtual_hosts) == 1
    clusters = config.virtual_hosts[0].routes[0].route.weighted_clusters.clusters
    assert [(c.name, c.weight.value) for c in clusters] == [("p1", 1), ("p2", 2)]


def test_request_and_backend_timeouts() -> None:
    """timeout_ms bounds the route; backend_timeout_ms bounds each try; retries stay the
    connect-failure ones every route has."""
    from dataclasses import replace

    from podway.ir import Forward

    base = route("r1", "/", "p")
    assert isinstance(base.action, Forward)
    both = replace(base, action=replace(base.action, timeout_ms=10_000, backend_timeout_ms=2_000))
    only_backend = replace(base, name="r2", action=replace(base.action, backend_timeout_ms=30_000))
    first, second, plain = _routes(vhost("a.com", both, only_backend, route("r3", "/", "p"))
                                   ).virtual_hosts[0].routes
    assert first.route.timeout.seconds == 10
    assert first.route.retry_policy.per_try_timeout.seconds == 2
    assert first.route.retry_policy.retry_on == RETRY_ON
    assert second.route.timeout.seconds == 30  # Envoy's 15 s default would cut it short
    assert second.route.retry_policy.per_try_timeout.seconds == 30
    assert not plain.route.HasField("timeout")
    assert not plain.route.retry_policy.HasField("per_try_timeout")


def test_every_forwarding_route_retries_what_never_reached_a_member() -> None:
    """Connect failures, resets before the request and refused streams are retried on another
    member, for every method (nothing was processed), within the cluster's retry cap; the
    policy is set once per virtual host (a route of its own would replace it)."""
    (host,) = _routes(vhost("a.com", route("r1", "/", "p"))).virtual_hosts
    assert not host.routes[0].route.HasField("retry_policy")
    policy = host.retry_policy
    assert set(policy.retry_on.split(",")) == {"reset-before-request", "connect-failure",
                                               "refused-stream"}
    assert policy.num_retries.value == 2
    assert [p.name for p in policy.retry_host_predicate] == [
        "envoy.retry_host_predicates.previous_hosts"]
    (threshold,) = cluster("p", PoolSettings()).circuit_breakers.thresholds
    assert threshold.max_retries.value == MAX_RETRIES
    # A plain threshold, no retry budget: the budget costs every request (docs/performance.md).
    assert not threshold.HasField("retry_budget")


def test_zero_backend_timeout_sets_no_per_try_timeout() -> None:
    """backend_timeout_ms 0 means none: the route keeps its request timeout, no per-try one."""
    from dataclasses import replace

    base = route("r1", "/", "p")
    assert isinstance(base.action, Forward)
    zero = replace(base, action=replace(base.action, timeout_ms=10_000, backend_timeout_ms=0))
    [only] = _routes(vhost("a.com", zero)).virtual_hosts[0].routes
    assert only.route.timeout.seconds == 10
    assert not only.route.retry_policy.HasField("per_try_timeout")


# HTTPPathModifier.ReplacePrefixMatch, as the Gateway API specification tabulates it.
SPEC_PREFIX_TABLE = [
    ("/foo/bar", "/foo", "/xyz", "/xyz/bar"),
    ("/foo/bar", "/foo", "/xyz/", "/xyz/bar"),
    ("/foo/bar", "/foo/", "/xyz", "/xyz/bar"),
    ("/foo/bar", "/foo/", "/xyz/", "/xyz/bar"),
    ("/foo", "/foo", "/xyz", "/xyz"),
    ("/foo/", "/foo", "/xyz", "/xyz/"),
    ("/foo/bar", "/foo", "", "/bar"),
    ("/foo/", "/foo", "", "/"),
    ("/foo", "/foo", "", "/"),
    ("/foo/", "/foo", "/", "/"),
    ("/foo", "/foo", "/", "/"),
    ("/bar", "/", "/xyz", "/xyz/bar"),
    ("/a.b/c", "/a.b", "/x", "/x/c"),
]


def _apply(pattern: str, substitution: str, path: str) -> str:
    # The patterns used are in the RE2 ∩ Python re subset; both substitute "" for a group
    # that did not take part.
    return re.sub(pattern, substitution, path, count=1)


@pytest.mark.parametrize(("path", "prefix", "replacement", "expected"), SPEC_PREFIX_TABLE)
def test_replace_prefix_match_rewrites_whole_path_elements(
        path: str, prefix: str, replacement: str, expected: str) -> None:
    """URLRewrite.prefix gives the spec's path for each row of the ReplacePrefixMatch table."""
    r = Route(name="r", match=RouteMatch(path=PathMatch(kind=PathKind.PREFIX, value=prefix)),
              action=Forward(backends=(WeightedPool(pool="p"),)),
              filters=(URLRewrite(prefix=replacement),), origin=ORIGIN)
    rewrite = _routes(vhost("a.com", r)).virtual_hosts[0].routes[0].route.regex_rewrite
    assert _apply(rewrite.pattern.regex, rewrite.substitution, path) == expected


@pytest.mark.parametrize(("path", "prefix", "replacement", "expected"), SPEC_PREFIX_TABLE)
def test_redirect_prefix_rewrites_whole_path_elements(
        path: str, prefix: str, replacement: str, expected: str) -> None:
    """Redirect.prefix gives the spec's Location path for each row of the table."""
    r = Route(name="r", match=RouteMatch(path=PathMatch(kind=PathKind.PREFIX, value=prefix)),
              action=Redirect(prefix=replacement), origin=ORIGIN)
    rewrite = _routes(vhost("a.com", r)).virtual_hosts[0].routes[0].redirect.regex_rewrite
    assert _apply(rewrite.pattern.regex, rewrite.substitution, path) == expected


def test_sni_host_check_gives_each_chain_a_table_where_other_hosts_answer_421() -> None:
    """With sni_host_check, each SNI chain serves only the hosts whose most specific SNI name is
    its own (wildcards cover any depth); other hosts answer 421; the default chain serves the
    hosts no SNI name covers."""
    certs = tuple(TLSCertificate(name=f"secret/{n}", hostnames=h, cert_pem="c", key_pem="k")
                  for n, h in (("a", ("a.example.com",)), ("w", ("*.example.com",)),
                               ("d", ())))
    hosts = ("a.example.com", "x.y.example.com", "*.example.com", "*")
    listener = Listener(name="l", address="127.0.0.1", port=8443, protocol=Protocol.HTTPS,
                        certificates=certs, sni_host_check=True,
                        virtual_hosts=tuple(vhost(h, route("r", "/", "p"),
                                                  wildcard=WildcardMode.SUFFIX) for h in hosts))
    tables = {c.name: {v.domains[0]: v.routes[0].direct_response.status == 421
                       for v in c.virtual_hosts}
              for c in route_configurations(listener, persistence={})}
    assert tables == {
        "l": {"a.example.com": True, "x.y.example.com": True, "*.example.com": True,
              "*": False},
        "l/sni/secret/a": {"a.example.com": False, "x.y.example.com": True,
                           "*.example.com": True, "*": True},
        "l/sni/secret/w": {"a.example.com": True, "x.y.example.com": False,
                           "*.example.com": False, "*": True},
    }
    built = listener_resource(listener)
    chains = [*built.filter_chains, built.default_filter_chain]
    used: dict[str, str] = {}
    for chain in chains:
        manager = hcm.HttpConnectionManager()
        chain.filters[0].typed_config.Unpack(manager)
        used[chain.name] = manager.rds.route_config_name
    assert used == {"secret/a": "l/sni/secret/a", "secret/w": "l/sni/secret/w", "default": "l"}


def test_without_sni_host_check_every_chain_shares_one_table() -> None:
    """Ingress HTTPS listeners keep one route table for every SNI chain, no 421."""
    certs = (TLSCertificate(name="secret/a", hostnames=("a.example.com",), cert_pem="c",
                            key_pem="k"),)
    listener = Listener(name="l", address="127.0.0.1", port=8443, protocol=Protocol.HTTPS,
                        certificates=certs, virtual_hosts=(vhost("b.example.com",
                                                                 route("r", "/", "p")),))
    [table] = route_configurations(listener, persistence={})
    assert table.name == "l"
    assert not table.virtual_hosts[0].routes[0].HasField("direct_response")


def _with(action: Forward) -> rc.Route:
    r = route("r", "/", "p")
    return _routes(vhost("a.com", replace(r, action=action))).virtual_hosts[0].routes[0]


def test_retry_policy_keeps_connect_failure_retries_and_limits_methods() -> None:
    """A route retry policy adds its conditions to the connect-failure ones; idempotent-only
    policies match :method, so a POST is tried once."""
    out = _with(Forward(backends=(WeightedPool(pool="p"),), retry=RetryPolicy(
        attempts=3, retry_on=(RetryOn.GATEWAY_ERROR,), per_try_timeout_ms=1500)))
    policy = out.route.retry_policy
    assert policy.retry_on == RETRY_ON + ",gateway-error"
    assert policy.num_retries.value == 3
    assert policy.per_try_timeout.ToMilliseconds() == 1500
    methods = policy.retriable_request_headers[0]
    assert methods.name == ":method"
    assert re.fullmatch(methods.string_match.safe_regex.regex, "GET")
    assert not re.fullmatch(methods.string_match.safe_regex.regex, "POST")
    every = _with(Forward(backends=(WeightedPool(pool="p"),), retry=RetryPolicy(
        idempotent_only=False, retry_on=(RetryOn.STATUS_CODES,), status_codes=(503,))))
    assert not every.route.retry_policy.retriable_request_headers
    assert list(every.route.retry_policy.retriable_status_codes) == [503]


def test_idle_timeout_and_no_retry_policy_without_one() -> None:
    """idle_timeout_ms sets the route's stream idle timeout; without a retry policy or a
    per-try timeout the route inherits its virtual host's (connect failures only)."""
    out = _with(Forward(backends=(WeightedPool(pool="p"),), idle_timeout_ms=60_000))
    assert out.route.idle_timeout.seconds == 60
    assert not out.route.HasField("retry_policy")


def test_cookie_persistence_always_lets_the_engine_set_the_cookie() -> None:
    """A cookie hash policy always has a ttl (0: a session cookie) and Path /, so clients
    without the cookie get one."""
    r = route("r", "/", "p")
    config = route_configuration(http_listener(vhost("a.com", r)), persistence={
        "p": Persistence(kind=PersistenceKind.COOKIE)})
    cookie = config.virtual_hosts[0].routes[0].route.hash_policy[0].cookie
    assert (cookie.name, cookie.HasField("ttl"), cookie.ttl.seconds, cookie.path) == (
        "podway-session", True, 0, "/")
