"""Which engines a gated pod waits for at the writing replica: those on its xDS and those
reporting to it, wherever their xDS goes; with engine groups, each only for the pools it is
sent."""

from __future__ import annotations

from podway.engines.member_health import Health, HostState, MemberHealthReports, Message
from podway.programs.controller.readiness_judge import counted_engines, judge, serving

HOST = ("pool/default/web/80", "10.0.0.7:8080")
SHOP = ("pool/shop/cart/80", "10.0.0.7:9090")  # the same pod in a pool of group "b"
OK = HostState(Health.HEALTHY)
SICK = HostState(Health.UNHEALTHY, "failed active health check")


def reports(**views: dict[tuple[str, str], HostState]) -> MemberHealthReports:
    """Each named engine has one report stream open here, with that view."""
    made = MemberHealthReports()
    for node, view in views.items():
        made.apply(object(), Message(node=node.replace("_", "-"), full=True, hosts=view))
    return made


def test_counted_are_the_engines_on_this_xds_and_those_reporting_here() -> None:
    """The union: an engine on another replica's xDS that reports here counts; one on this
    xDS that does not report counts too (it blocks True)."""
    assert counted_engines({"on-xds"}, {"reporting", "on-xds"}) == {"on-xds", "reporting"}
    assert counted_engines((), ()) == frozenset()


def test_an_engine_reporting_here_from_another_replica_s_xds_decides() -> None:
    """edge-2's xDS goes to the follower (the leader's ADS has only edge-1) but it reports to
    the leader: its unhealthy member makes the pod False; healthy, it adds to True."""
    connected = {"edge-1"}
    sick = reports(edge_1={HOST: OK}, edge_2={HOST: SICK})
    found = judge((HOST,), counted_engines(connected, sick.nodes), sick.view)
    assert (found.status, found.reason) == ("False", "Unhealthy")
    assert "engine edge-2" in found.message
    fine = reports(edge_1={HOST: OK}, edge_2={HOST: OK})
    found = judge((HOST,), counted_engines(connected, fine.nodes), fine.view)
    assert (found.status, found.message) == ("True", f"healthy in 2 engine(s): {HOST[0]} "
                                                     f"{HOST[1]}")


def test_only_reports_and_no_xds_still_count_and_silence_on_this_xds_blocks() -> None:
    """No engine on this replica's xDS at all: the reporting ones decide (not NoEngine). An
    engine on this xDS without a report here blocks True."""
    only = reports(edge_1={HOST: OK})
    assert judge((HOST,), counted_engines((), only.nodes), only.view).status == "True"
    blocked = judge((HOST,), counted_engines({"edge-2"}, only.nodes), only.view)
    assert (blocked.status, blocked.reason) == (None, "WaitingForEngines")
    assert "engine edge-2 has not reported" in blocked.message
    nobody = judge((HOST,), counted_engines((), ()), only.view)
    assert nobody.reason == "NoEngine"



# Group "a" is sent web's pool, group "b" the shop pool, group "c" nothing of this pod.
POOLS = {"a": {HOST[0]}, "b": {SHOP[0]}, "c": set()}


def test_an_engine_of_another_group_neither_blocks_nor_counts() -> None:
    """edge-b (group b) never gets group a's pool: it does not have HOST and never will. The
    pod turns True on edge-a alone — on its report, and on edge-b's silence too."""
    view = reports(edge_a={HOST: OK}, edge_b={})
    serves = serving({"edge-a": "a", "edge-b": "b"}, POOLS.__getitem__)
    found = judge((HOST,), counted_engines({"edge-b"}, view.nodes), view.view, serves)
    assert (found.status, found.message) == ("True", f"healthy in 1 engine(s): {HOST[0]} "
                                                     f"{HOST[1]}")
    silent = reports(edge_a={HOST: OK})
    assert judge((HOST,), {"edge-a", "edge-b"}, silent.view, serves).status == "True"
    # Without groups the same two engines block True (edge-b lacks the member): the old bug.
    assert judge((HOST,), {"edge-a", "edge-b"}, view.view).status is None


def test_an_engine_without_a_group_or_of_the_pool_s_group_still_blocks() -> None:
    """No group (every pool) or group a: a silent engine, one lacking the member, or one
    failing it still decides."""
    serves = serving({"edge-a": "a", "edge-all": ""}, POOLS.__getitem__)
    lacking = reports(edge_a={}, edge_all={HOST: OK})
    found = judge((HOST,), lacking.nodes, lacking.view, serves)
    assert (found.status, found.reason) == (None, "WaitingForEngines")
    assert "engine edge-a does not have" in found.message
    sick = reports(edge_a={HOST: OK}, edge_all={HOST: SICK})
    assert judge((HOST,), sick.nodes, sick.view, serves).status == "False"
    silent = judge((HOST,), {"edge-a", "edge-all"}, reports(edge_a={HOST: OK}).view, serves)
    assert "engine edge-all has not reported" in silent.message


def test_each_engine_is_asked_only_about_the_members_whose_pool_it_is_sent() -> None:
    """A pod in pools of two groups: True once edge-a finds HOST and edge-b finds SHOP
    healthy; a member whose pool no counted engine is sent keeps the pod unknown, as no engine
    at all does."""
    both = reports(edge_a={HOST: OK}, edge_b={SHOP: OK})
    serves = serving({"edge-a": "a", "edge-b": "b"}, POOLS.__getitem__)
    found = judge((HOST, SHOP), both.nodes, both.view, serves)
    assert (found.status, found.message.split(":")[0]) == ("True", "healthy in 2 engine(s)")
    only_a = reports(edge_a={HOST: OK})
    half = judge((HOST, SHOP), only_a.nodes, only_a.view, serves)
    assert (half.status, half.reason) == (None, "WaitingForEngines")
    assert f"no engine connected or reporting here is sent {SHOP[0]}" in half.message
    other = reports(edge_c={})
    none = judge((HOST,), other.nodes, other.view, serving({"edge-c": "c"}, POOLS.__getitem__))
    assert (none.status, none.reason) == (None, "NoEngine")
    assert "engine groups" in none.message


def test_serving_reads_no_group_as_every_pool() -> None:
    """An engine absent from the groups or with group "" is sent every pool (not asked about
    groups at all); one of group G exactly G's pools."""
    asked: list[str] = []

    def pools_of(group: str) -> set[str]:
        asked.append(group)
        return POOLS[group]

    serves = serving({"edge-a": "a", "edge-all": ""}, pools_of)
    assert serves("edge-all", SHOP[0])
    assert serves("unknown", SHOP[0])
    assert asked == []
    assert serves("edge-a", HOST[0])
    assert not serves("edge-a", SHOP[0])
