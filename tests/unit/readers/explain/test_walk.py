"""The explain walk over hand-made IRs: each decision and verdict, one property per test."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from podway.ir import (
    IR,
    DirectResponse,
    EngineKind,
    Forward,
    HeaderMatch,
    L4Route,
    Listener,
    Member,
    MemberState,
    ObjectRef,
    PathKind,
    PathMatch,
    Pool,
    Route,
    RouteMatch,
    TLSCertificate,
    TLSOptions,
    VirtualHost,
    WeightedPool,
    WildcardMode,
)
from podway.ir import ListenerProtocol as Protocol
from podway.readers.explain import Context, Mark, OutcomeKind, Query, QueryError, explain, parse
from podway.translate.core.problems import Problem, Reason

ROUTE = ObjectRef("HTTPRoute", "app", "r")
GW = ObjectRef("Gateway", "app", "gw")
SVC = ObjectRef("Service", "app", "web")


def _route(name: str, path: str, pool: str | None = "web", **match: object) -> Route:
    return Route(name=name, origin=ROUTE,
                 match=RouteMatch(path=PathMatch(kind=PathKind.PREFIX, value=path),
                                  **match),  # type: ignore[arg-type]
                 action=Forward(backends=(WeightedPool(pool=pool),)))


def _pool(*states: MemberState, name: str = "web") -> Pool:
    return Pool(name=name, origin=SVC, members=tuple(
        Member(address=f"10.0.0.{i}", port=8080, state=s) for i, s in enumerate(states, 1)))


def _http(*vhosts: VirtualHost, port: int = 80, **kw: object) -> Listener:
    return Listener(name=f"l{port}", address="0.0.0.0", port=port, protocol=Protocol.HTTP,
                    virtual_hosts=vhosts, origins=(GW,), **kw)  # type: ignore[arg-type]


def _ir(*listeners: Listener, pools: tuple[Pool, ...] = (_pool(MemberState.READY),)) -> IR:
    return IR(listeners=listeners, pools=MappingProxyType({p.name: p for p in pools}))


SHOP = VirtualHost(name="shop", hostname="shop.test", routes=(
    _route("api-prod", "/api", headers=(HeaderMatch(name="x-env", value="prod"),)),
    _route("api", "/api"),
))


def test_query_parsing_strips_the_port_normalises_the_path_and_defaults_ports() -> None:
    """Host loses its port and case, the path is normalised as Envoy does, 80/443 default."""
    q = parse("http://x.test//a/./b/../c?q=1", headers=["Host: Shop.Test:8080", "X-A: 1"])
    assert (q.host, q.port, q.path, q.headers) == ("shop.test", 80, "/a/c?q=1", (("x-a", "1"),))
    s = parse("https://shop.test/")
    assert (s.port, s.sni) == (443, "shop.test")
    t = parse("tcp://198.18.0.1:5432")
    assert (t.address, t.host, t.sni) == ("198.18.0.1", "", None)


@pytest.mark.parametrize(("url", "kw", "words"), [
    ("shop.test/", {}, "not a URL"),
    ("ftp://shop.test/", {}, "scheme"),
    ("tcp://198.18.0.1", {}, "needs a port"),
    ("http://shop.test/", {"headers": ["no colon"]}, "Name: value"),
    ("http://shop.test/", {"source_ip": "me"}, "--source-ip"),
    ("http://shop.test:99999/", {}, "not a valid URL"),
])
def test_bad_input_is_one_clear_error(url: str, kw: dict[str, object], words: str) -> None:
    """Each unusable URL or flag raises QueryError naming what is wrong."""
    with pytest.raises(QueryError, match=words):
        parse(url, **kw)  # type: ignore[arg-type]


def test_each_route_says_why_it_did_not_match_and_the_first_match_wins() -> None:
    """Route order is kept; the header route fails on its header, the next one is chosen."""
    out = explain(_ir(_http(SHOP)), parse("http://shop.test/api/x", headers=["x-env: dev"]))
    assert [(c.name, c.matched, c.chosen) for c in out.candidates] == [
        ("api-prod", False, False), ("api", True, True)]
    assert out.candidates[0].why == "header x-env: 'dev' is not 'prod'"
    assert out.verdict.outcomes[0].kind is OutcomeKind.SERVED
    assert out.verdict.summary.startswith("served by web")


def test_no_route_is_404_naming_the_routes_objects() -> None:
    """A path no route takes: 404, each candidate gives its first differing condition."""
    out = explain(_ir(_http(SHOP)), parse("http://shop.test/apix"))
    assert out.verdict.outcomes[0].status == 404
    assert out.candidates[1].why == "path '/apix' is not prefix /api"
    assert out.verdict.fix == (ROUTE,)


def test_unknown_host_is_404_and_points_to_the_listener_that_serves_it() -> None:
    """No virtual host covers the Host: 404, fix the listener's objects, hint the other port."""
    other = _http(VirtualHost(name="admin", hostname="admin.test", routes=(_route("a", "/"),)),
                  port=8080)
    out = explain(_ir(_http(SHOP), other), parse("http://admin.test/"))
    assert out.verdict.outcomes[0].status == 404
    assert "served on l8080" in out.verdict.summary
    assert out.verdict.fix == (GW,)


def test_nothing_on_the_port_is_a_refused_connection_listing_served_ports() -> None:
    out = explain(_ir(_http(SHOP)), parse("http://shop.test:81/"))
    assert out.verdict.outcomes[0].kind is OutcomeKind.RESET
    assert "nothing serves TCP port 81 (served: 80/HTTP)" in out.verdict.summary


def test_a_pool_without_ready_members_is_503_and_names_the_service() -> None:
    """Not-ready and draining members take nothing new: 503, look at the route and Service."""
    ir = _ir(_http(SHOP), pools=(_pool(MemberState.NOT_READY, MemberState.DRAINING),))
    out = explain(ir, parse("http://shop.test/api"))
    assert (out.verdict.outcomes[0].kind, out.verdict.outcomes[0].status) == (
        OutcomeKind.NO_MEMBER, 503)
    assert out.verdict.fix == (ROUTE, SVC)
    assert [m.receives for m in out.pools[0].members] == [False, False]


def test_live_engine_health_overrides_a_ready_member() -> None:
    """A ready member the engine marks failed takes nothing; healthy ones serve."""
    ir = _ir(_http(SHOP), pools=(_pool(MemberState.READY),))
    sick = Context(health={"web": {"10.0.0.1:8080": "/failed_outlier_check"}})
    out = explain(ir, parse("http://shop.test/api"), sick)
    assert out.verdict.outcomes[0].kind is OutcomeKind.NO_MEMBER
    assert out.pools[0].members[0].why == "failing the engine's checks (failed_outlier_check)"
    assert "(1 failing the engine's checks (failed_outlier_check))" in out.verdict.summary
    well = Context(health={"web": {"10.0.0.1:8080": "healthy"}})
    assert explain(ir, parse("http://shop.test/api"), well).verdict.outcomes[0].kind is (
        OutcomeKind.SERVED)


def test_a_missing_pool_and_an_invalid_share_give_503_and_500_with_the_rule_problems() -> None:
    """Shares keep their weights; the route's problems about other rules are left out."""
    vhost = VirtualHost(name="v", hostname="*", routes=(Route(
        name="httproute/app/r/rule/1/match/0", origin=ROUTE,
        match=RouteMatch(), action=Forward(backends=(
            WeightedPool(pool="gone", weight=3), WeightedPool(pool=None, weight=1)))),))
    problems = (Problem(ref=ROUTE, reason=Reason.BACKEND_NOT_FOUND, message="rule 1",
                        field="spec.rules[1].backendRefs[1]"),
                Problem(ref=ROUTE, reason=Reason.BACKEND_NOT_FOUND, message="rule 0",
                        field="spec.rules[0].backendRefs[0]"))
    out = explain(_ir(_http(vhost)), parse("http://a.test/"), Context(problems=problems))
    assert [(o.kind, o.status, o.percent) for o in out.verdict.outcomes] == [
        (OutcomeKind.NO_POOL, 503, 75.0), (OutcomeKind.DIRECT, 500, 25.0)]
    assert [p.message for p in out.verdict.problems] == ["rule 1"]


def test_direct_response_and_the_engine_refusing_a_listener() -> None:
    vhost = VirtualHost(name="v", hostname="*", routes=(Route(
        name="gone", origin=ROUTE, match=RouteMatch(), action=DirectResponse(status=410)),))
    ir = _ir(_http(vhost))
    assert explain(ir, parse("http://a.test/")).verdict.outcomes[0].status == 410
    refused = explain(ir, parse("http://a.test/"), Context(refused={"l80": "cannot bind"}))
    assert refused.verdict.outcomes[0].kind is OutcomeKind.RESET
    assert "refused listener l80" in refused.verdict.summary


def test_one_label_wildcards_fall_through_to_the_catch_all() -> None:
    """An Ingress *.shop.test does not cover a.b.shop.test: the catch-all answers, and says
    why."""
    one = VirtualHost(name="w", hostname="*.shop.test", routes=(_route("w", "/"),))
    any_host = VirtualHost(name="any", hostname="*", routes=(_route("any", "/"),))
    out = explain(_ir(_http(one, any_host)), parse("http://a.b.shop.test/"))
    assert out.virtual_host == "any"
    assert "covers one label only" in out.steps[1].text


def _cert(name: str, *hosts: str) -> TLSCertificate:
    return TLSCertificate(name=name, hostnames=hosts, cert_pem="C", key_pem="K")


def _https(check: bool) -> Listener:
    return Listener(
        name="l443", address="0.0.0.0", port=443, protocol=Protocol.HTTPS, origins=(GW,),
        certificates=(_cert("wild", "*.shop.test"), _cert("exact", "api.shop.test")),
        sni_host_check=check, virtual_hosts=(
            VirtualHost(name="api", hostname="api.shop.test", wildcard=WildcardMode.SUFFIX,
                        routes=(_route("api", "/"),)),
            VirtualHost(name="w", hostname="*.shop.test", wildcard=WildcardMode.SUFFIX,
                        routes=(_route("w", "/"),))))


def test_sni_chooses_the_most_specific_certificate() -> None:
    """Exact SNI names beat wildcards; no SNI takes the first certificate."""
    out = explain(_ir(_https(False)), parse("https://api.shop.test/"))
    assert "certificate exact" in out.steps[1].text
    out = explain(_ir(_https(False)), parse("https://www.shop.test/"))
    assert "certificate wild" in out.steps[1].text


def test_one_named_certificate_is_said_to_serve_any_sni() -> None:
    """The engine gives a listener with one named certificate its default chain alone (the
    named chain would equal it), which serves every SNI: explain says so, whether the SNI
    names the certificate or not, and still names the hosts a checking client sees; the
    verdicts are those of before (421 with ``sni_host_check`` for a host it does not name)."""
    one = replace(_https(True), certificates=(_cert("exact", "api.shop.test"),))
    out = explain(_ir(one), parse("https://api.shop.test/"))
    assert ("certificate exact, the listener's only one (for any SNI): SNI api.shop.test "
            "matches api.shop.test") in out.steps[1].text
    assert out.verdict.outcomes[0].kind is OutcomeKind.SERVED
    out = explain(_ir(one), parse("https://www.shop.test/"))
    assert ("certificate exact, the listener's only one (for any SNI) (SNI www.shop.test "
            "matches no certificate name); a client checking names sees api.shop.test"
            ) in out.steps[1].text
    assert out.verdict.outcomes[0].status == 421
    # beside a passthrough route by SNI, the named chain stays: the first certificate's words
    db = L4Route(name="db", hostnames=("db.shop.test",), backends=(WeightedPool(pool="web"),),
                 origin=ROUTE)
    shared = replace(one, l4_routes=(db,))
    assert "the listener's first" in explain(_ir(shared), parse("https://www.shop.test/")
                                             ).steps[1].text


def test_a_host_of_another_certificate_is_421_with_sni_host_check() -> None:
    """SNI www.shop.test (wildcard chain), Host api.shop.test (exact chain's): 421."""
    q = parse("https://www.shop.test/", headers=["Host: api.shop.test"])
    assert explain(_ir(_https(True)), q).verdict.outcomes[0].status == 421
    assert explain(_ir(_https(False)), q).verdict.outcomes[0].kind is OutcomeKind.SERVED


def test_sni_and_host_match_in_any_case_as_the_engine_matches_them() -> None:
    """A capitalised SNI reaches the certificate naming it (Envoy lower-cases SNI), not the
    default chain that asks for a client certificate; a Host with capitals and a trailing dot
    reaches its virtual host (the engine drops one dot). Queries built by hand, as sent."""
    mtls = replace(_cert("mtls", "mtls.shop.test"),
                   options=TLSOptions(client_ca_pem="CA", client_ca="ca"))
    listener = replace(_https(False), certificates=(mtls, _cert("exact", "api.shop.test")))
    q = Query(scheme="https", port=443, host="API.Shop.Test.", sni="API.SHOP.TEST")
    out = explain(_ir(listener), q)
    assert "certificate exact: SNI API.SHOP.TEST matches api.shop.test" in out.steps[1].text
    assert out.virtual_host == "api"
    assert out.verdict.outcomes[0].kind is OutcomeKind.SERVED
    assert explain(_ir(listener), parse("https://API.shop.test./")).virtual_host == "api"


def test_an_sni_with_a_trailing_dot_matches_no_name_and_says_why() -> None:
    """RFC 6066 forbids the dot and Envoy keeps it: the default chain (here the first
    certificate); explain's default SNI for a dotted URL host drops it, as curl does."""
    out = explain(_ir(_https(False)), parse("https://api.shop.test./", sni="api.shop.test."))
    assert "certificate wild, the listener's first" in out.steps[1].text
    assert "keeps an SNI's trailing dot" in out.steps[1].text
    q = parse("https://Api.Shop.Test./")
    assert (q.host, q.sni) == ("api.shop.test.", "api.shop.test")
    assert "certificate exact" in explain(_ir(_https(False)), q).steps[1].text


def test_a_host_loses_one_trailing_dot_only() -> None:
    """``shop.test..`` is ``shop.test.`` to the engine: no such host (explain used to drop
    every dot)."""
    out = explain(_ir(_http(SHOP)), parse("http://shop.test../api"))
    assert out.verdict.outcomes[0].status == 404


def test_an_ip_url_is_matched_by_the_host_a_client_sends_for_it() -> None:
    """``http://[fc00::1]/`` sends ``Host: [fc00::1]``: the report names that, not a mangled
    address."""
    out = explain(_ir(_http(SHOP)), parse("http://[fc00::1]/api"))
    assert "covers Host '[fc00::1]'" in out.steps[1].text


def _l4(protocol: Protocol, *routes: L4Route, port: int = 5432) -> Listener:
    return Listener(name=f"l{port}", address="198.18.0.1", port=port, protocol=protocol,
                    l4_routes=routes, origins=(GW,))


def test_passthrough_routes_by_sni_and_closes_what_no_route_takes() -> None:
    """An SNI a route names, in any case, is passed through; another name, or the route's name
    with a trailing dot, is closed."""
    db = L4Route(name="db", hostnames=("db.test",), backends=(WeightedPool(pool="web"),),
                 origin=ROUTE)
    ir = _ir(_l4(Protocol.TLS, db, port=443))
    out = explain(ir, parse("https://db.test/"))
    assert out.verdict.outcomes[0].kind is OutcomeKind.SERVED
    assert out.steps[1].mark is Mark.OK
    assert "passthrough" in out.steps[1].text
    closed = explain(ir, parse("https://other.test/"))
    assert closed.verdict.outcomes[0].kind is OutcomeKind.RESET
    sent = Query(scheme="tls", port=443, address="198.18.0.1", sni="DB.Test")
    assert explain(ir, sent).verdict.outcomes[0].kind is OutcomeKind.SERVED
    dotted = explain(ir, replace(sent, sni="db.test."))
    assert dotted.verdict.outcomes[0].kind is OutcomeKind.RESET


def test_https_and_passthrough_sharing_a_port_go_by_sni() -> None:
    """An HTTPS listener that also passes TLS through: an SNI only a passthrough route names
    is passed through; a name both claim stays with the certificate; a terminate-mode route
    says it decrypts."""
    db = L4Route(name="db", hostnames=("db.shop.test", "api.shop.test"),
                 backends=(WeightedPool(pool="web"),), origin=ROUTE)
    shared = replace(_https(False), l4_routes=(db,))
    out = explain(_ir(shared), parse("https://db.shop.test/"))
    assert "passthrough" in out.steps[1].text
    sent = Query(scheme="tls", port=443, address="198.18.0.1", sni="DB.SHOP.TEST")
    assert "passthrough" in explain(_ir(shared), sent).steps[1].text
    assert out.verdict.outcomes[0].kind is OutcomeKind.SERVED
    out = explain(_ir(shared), parse("https://api.shop.test/"))
    assert "certificate exact" in out.steps[1].text
    mq = L4Route(name="mq", hostnames=("mq.test",), backends=(WeightedPool(pool="web"),),
                 origin=ROUTE, certificate=_cert("mq-cert", "mq.test"))
    out = explain(_ir(_l4(Protocol.TLS, mq, port=8443)), parse("tls://198.18.0.1:8443",
                                                               sni="mq.test"))
    assert "terminates TLS with certificate mq-cert" in out.steps[1].text


def test_tcp_by_address_and_udp_split_by_weight() -> None:
    """An exact VIP beats a wildcard listener; UDP splits by weight too (one split cluster),
    and an unusable UDP share goes to the others (a datagram has nothing to refuse)."""
    route = L4Route(name="u", backends=(WeightedPool(pool="a", weight=1),
                                         WeightedPool(pool="b", weight=3)), origin=ROUTE)
    pools = (_pool(MemberState.READY, name="a"), _pool(MemberState.READY, name="b"))
    ir = _ir(_l4(Protocol.UDP, route, port=53), _l4(Protocol.TCP, route), pools=pools)
    udp = explain(ir, parse("udp://198.18.0.1:53"))
    assert [(o.pool, o.percent) for o in udp.verdict.outcomes] == [("a", 25.0), ("b", 75.0)]
    lost = L4Route(name="u", backends=(*route.backends, WeightedPool(pool=None, weight=4)),
                   origin=ROUTE)
    udp = explain(_ir(_l4(Protocol.UDP, lost, port=53), pools=pools), parse("udp://198.18.0.1:53"))
    assert [(o.pool, o.percent) for o in udp.verdict.outcomes] == [("a", 25.0), ("b", 75.0)]
    tcp = explain(ir, parse("tcp://198.18.0.1:5432"))
    assert [(o.pool, o.percent) for o in tcp.verdict.outcomes] == [("a", 25.0), ("b", 75.0)]
    assert explain(ir, parse("tcp://198.18.0.2:5432")).verdict.outcomes[0].kind is (
        OutcomeKind.RESET)


def test_a_kernel_served_port_says_dnat_by_the_kernel_engine() -> None:
    """A listener the kernel engine serves (Listener.engine) is explained as DNAT: how the
    member is chosen and which address it sees."""
    route = L4Route(name="u", backends=(WeightedPool(pool="a"),), origin=ROUTE,
                    client_ip_affinity=True)
    listener = replace(_l4(Protocol.TCP, route), engine=EngineKind.KERNEL, transparent=True)
    out = explain(_ir(listener, pools=(_pool(MemberState.READY, name="a"),)),
                  parse("tcp://198.18.0.1:5432"))
    assert out.verdict.summary.startswith("DNAT by the kernel engine to a member of a")
    engine = next(s for s in out.steps if s.stage == "engine")
    assert "hash of the client's address" in engine.text
    assert "the client's own address" in engine.text
    plain = explain(_ir(_l4(Protocol.TCP, route), pools=(_pool(MemberState.READY, name="a"),)),
                    parse("tcp://198.18.0.1:5432"))
    assert not [s for s in plain.steps if s.stage == "engine"]


def test_a_scheme_the_listener_does_not_speak_fails_with_a_hint() -> None:
    out = explain(_ir(_http(SHOP)), parse("tcp://198.18.0.9:80"))
    assert out.verdict.outcomes[0].kind is OutcomeKind.RESET
    assert "use http://" in out.verdict.summary


def test_json_data_has_the_verdict_and_every_route() -> None:
    data = explain(_ir(_http(SHOP)), parse("http://shop.test/api")).to_data()
    assert data["verdict"]["outcomes"][0]["status_class"] == "2xx"
    assert [r["name"] for r in data["routes"]] == ["api-prod", "api"]


def test_a_serving_terminating_member_takes_requests_only_while_no_ready_one_passes() -> None:
    """A rollout: the old pod (draining, still serving) serves while the new ready pod has not
    passed the engine's checks, and takes nothing new once it has."""
    pool = Pool(name="web", origin=SVC, members=(
        Member(address="10.0.0.1", port=8080),
        Member(address="10.0.0.2", port=8080, state=MemberState.DRAINING, serving=True)))
    ir = _ir(_http(SHOP), pools=(pool,))
    unchecked = Context(health={"web": {"10.0.0.1:8080": "/failed_active_hc",
                                        "10.0.0.2:8080": "healthy"}})
    out = explain(ir, parse("http://shop.test/api"), unchecked)
    assert out.verdict.outcomes[0].kind is OutcomeKind.SERVED
    assert [m.receives for m in out.pools[0].members] == [False, True]
    passed = Context(health={"web": {"10.0.0.1:8080": "healthy", "10.0.0.2:8080": "healthy"}})
    out = explain(ir, parse("http://shop.test/api"), passed)
    assert [m.receives for m in out.pools[0].members] == [True, False]
    assert "takes nothing new" in out.pools[0].members[1].why
