"""The readiness gate's pure decisions: which members a pod has, the verdict from the engines'
reports, and the condition written (only on change, transition time only on a flip)."""

from __future__ import annotations

from collections.abc import Mapping

from podway.engines.member_health import Health, HostKey, HostState
from podway.ir import Member, Pool
from podway.model.base import ObjectRef
from podway.model.core import LB_READY, EndpointSlice, PodCondition
from podway.programs.controller.readiness_judge import Verdict, condition, judge
from podway.programs.controller.readiness_members import pod_members, terminating_pods

HOST = ("pool/default/web/80", "10.0.0.7:8080")
OTHER = ("pool/default/web/443", "10.0.0.7:8443")
OK = HostState(Health.HEALTHY)
SICK = HostState(Health.UNHEALTHY, "failed active health check")
NEW = HostState(Health.PENDING, "waiting for its first health check")


def views(**by_node: Mapping[HostKey, HostState] | None
          ) -> dict[str, Mapping[HostKey, HostState] | None]:
    return {k.replace("_", "-"): v for k, v in by_node.items()}


def verdict(members: tuple[HostKey, ...], **by_node: Mapping[HostKey, HostState] | None
            ) -> Verdict:
    found = views(**by_node)
    return judge(members, found.keys(), found.get)


def test_pod_members_take_pod_origins_of_every_pool_and_skip_nodes_and_zero_weights() -> None:
    """A pod serving two pools has both (pool, address:port); node members and weight-0
    members (never sent to the engine) belong to no pod."""
    pod = ObjectRef("Pod", "default", "web-1")
    pools = {
        "pool/default/web/80": Pool(name="pool/default/web/80", members=(
            Member(address="10.0.0.7", port=8080, origin=pod),
            Member(address="10.0.0.8", port=8080, origin=ObjectRef("Pod", "default", "w2"),
                   weight=0))),
        "pool/default/web/443": Pool(name="pool/default/web/443", members=(
            Member(address="10.0.0.7", port=8443, origin=pod),)),
        "pool/default/np/80": Pool(name="pool/default/np/80", members=(
            Member(address="192.0.2.1", port=30080, origin=ObjectRef("Node", "", "n1")),)),
    }
    assert pod_members(pools) == {("default", "web-1"): (OTHER, HOST)}


def test_true_only_when_every_engine_reports_every_member_healthy() -> None:
    """Healthy in both engines for both pools: True; one member pending in one engine: unknown."""
    both = {HOST: OK, OTHER: OK}
    assert verdict((HOST, OTHER), edge_1=both, edge_2=both).status == "True"
    waiting = verdict((HOST, OTHER), edge_1=both, edge_2={HOST: OK, OTHER: NEW})
    assert (waiting.status, waiting.reason) == (None, "WaitingForEngines")
    assert "edge-2" in waiting.message
    assert "waiting for its first health check" in waiting.message


def test_an_engine_without_a_report_or_without_the_member_blocks_true() -> None:
    """A connected engine that never reported, or whose Envoy lacks the member: unknown."""
    silent = verdict((HOST,), edge_1={HOST: OK}, edge_2=None)
    assert (silent.status, silent.reason) == (None, "WaitingForEngines")
    assert "engine edge-2 has not reported" in silent.message
    lacking = verdict((HOST,), edge_1={HOST: OK}, edge_2={})
    assert lacking.status is None
    assert "does not have" in lacking.message


def test_one_engine_failing_the_member_is_false_with_its_reason() -> None:
    """Unhealthy anywhere wins over waiting elsewhere: False, naming engine, pool and reason."""
    found = verdict((HOST,), edge_1={HOST: SICK}, edge_2=None)
    assert (found.status, found.reason) == ("False", "Unhealthy")
    assert found.message == f"engine edge-1: {HOST[0]} {HOST[1]} failed active health check"


def test_no_member_or_no_engine_is_unknown() -> None:
    assert verdict((), edge_1={}).reason == "NotServed"
    assert judge((HOST,), (), lambda _: None).reason == "NoEngine"


def test_messages_name_at_most_three_items() -> None:
    """A pod in many pools or many silent engines gets a bounded message."""
    found = judge((HOST,), [f"e{i}" for i in range(5)], lambda _: None)
    assert found.message.endswith("; and 2 more")
    assert found.message.count("has not reported") == 3


def test_condition_is_written_only_on_change_and_keeps_its_transition_time() -> None:
    """Same status, reason and message: nothing; same status, new message: the old
    lastTransitionTime; a flip: now."""
    healthy = Verdict("True", "Healthy", "healthy in 1 engine(s): x")
    current = PodCondition(type=LB_READY, status="True", reason="Healthy",
                           message="healthy in 1 engine(s): x", last_transition_time="T0")
    assert condition(current, healthy, now="T1") is None
    moved = condition(current, Verdict("True", "Healthy", "healthy in 2 engine(s): x"),
                      now="T1")
    assert moved is not None
    assert moved["lastTransitionTime"] == "T0"
    flipped = condition(current, Verdict("False", "Unhealthy", "engine e: sick"), now="T1")
    assert flipped == {"type": LB_READY, "status": "False", "reason": "Unhealthy",
                       "message": "engine e: sick", "lastTransitionTime": "T1"}


def test_unknown_never_takes_a_true_pod_out_but_explains_a_waiting_one() -> None:
    """A new engine or a controller restart (unknown) leaves True alone; a pod without the
    condition, or False, gets False with the reason it waits for."""
    unknown = Verdict(None, "WaitingForEngines", "engine e2 has not reported member health")
    true = PodCondition(type=LB_READY, status="True", reason="Healthy", message="m",
                        last_transition_time="T0")
    assert condition(true, unknown, now="T1") is None
    fresh = condition(None, unknown, now="T1")
    assert fresh is not None
    assert (fresh["status"], fresh["reason"]) == ("False", "WaitingForEngines")


def test_a_pod_with_a_terminating_endpoint_counts_as_terminating() -> None:
    """Its gate is left alone (it is going away); ready and not-ready pods are judged."""
    found = EndpointSlice.model_validate({
        "metadata": {"name": "web-1", "namespace": "shop"},
        "endpoints": [
            {"addresses": ["10.0.0.7"], "conditions": {"terminating": True, "serving": True},
             "targetRef": {"kind": "Pod", "name": "old"}},
            {"addresses": ["10.0.0.8"], "conditions": {"ready": False},
             "targetRef": {"kind": "Pod", "name": "new"}},
            {"addresses": ["10.0.0.9"], "conditions": {"terminating": True}}]})
    assert terminating_pods({("shop", "web-1"): found}) == frozenset({("shop", "old")})
