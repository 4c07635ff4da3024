"""Which engines a gated pod waits for at the writing replica: those on its xDS and those
reporting to it, wherever their xDS goes."""

from __future__ import annotations

from podway.controller.readiness import counted_engines, judge
from podway.xds.member_health import Health, HostState, MemberHealthReports, Message

HOST = ("pool/default/web/80", "10.0.0.7:8080")
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

