"""The readiness gate's per-state inputs follow only what was replaced: ``PodMembers`` keeps
``pod_members`` from one pool map to the next, ``GatedPods`` the gated and terminating pods;
over random sequences of changes, with the unchanged objects kept (as sources and the
translator keep them), both equal a scan of everything."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podway.ir import Member, Pool
from podway.model.base import ObjectRef
from podway.model.core import LB_READY, EndpointSlice, Pod
from podway.model.snapshot import Key
from podway.programs.controller.readiness_members import (
    GatedPods,
    PodMembers,
    pod_members,
    terminating_pods,
)
from tests import builders

PODS = st.sampled_from(["a", "b", "c"])
member = st.builds(lambda pod, last, weight, kind: Member(
    address=f"198.18.0.{last}", port=8080, weight=weight, origin=ObjectRef(kind, "ns", pod)),
    PODS, st.integers(1, 3), st.sampled_from([0, 1, 1]), st.sampled_from(["Pod", "Pod", "Node"]))
pool = st.tuples(st.sampled_from(["p1", "p2", "p3"]), st.lists(member, max_size=3))
# a step: put a pool (a new object under its name) or remove one
step = st.one_of(pool.map(lambda p: ("put", p)),
                 st.sampled_from(["p1", "p2", "p3"]).map(lambda n: ("remove", n)))


@given(st.lists(step, max_size=12))
def test_pod_members_follow_the_pools_replaced(steps: list[tuple[str, object]]) -> None:
    pools: dict[str, Pool] = {}
    tracked = PodMembers()
    assert tracked.update(pools) == {}
    for action, arg in steps:
        pools = dict(pools)  # a new map; the pools not touched are the same objects
        if action == "put":
            name, members = arg  # type: ignore[misc]
            pools[name] = Pool(name=name, members=tuple(members))
        else:
            pools.pop(str(arg), None)
        assert dict(tracked.update(pools)) == pod_members(pools)


def _pod(name: str, gated: bool) -> Pod:
    return Pod.model_validate(builders.pod(name, None, namespace="ns",
                                           readiness_gates=[LB_READY] if gated else []))


def terminating_slice(name: str, terminating: list[str], *, subnet: int = 0) -> EndpointSlice:
    """Service ``web``'s slice ``name`` with a terminating endpoint per Pod of
    ``terminating`` (addresses 198.18.<subnet>.1 on)."""
    return EndpointSlice.model_validate({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": [
            {"addresses": [f"198.18.{subnet}.{i + 1}"], "conditions": {"terminating": True},
             "targetRef": {"kind": "Pod", "name": pod}} for i, pod in enumerate(terminating)]})


gated_step = st.one_of(
    st.tuples(st.just("pod"), PODS, st.booleans()),
    st.tuples(st.just("slice"), st.sampled_from(["s1", "s2"]), st.lists(PODS, max_size=2)),
    st.tuples(st.just("drop"), st.sampled_from(["a", "b", "s1", "s2"]), st.none()))


@given(st.lists(gated_step, max_size=12))
def test_gated_and_terminating_pods_follow_what_was_replaced(
        steps: list[tuple[str, str, object]]) -> None:
    """Over Pods and EndpointSlices put and deleted (the others kept as the same objects):
    the gated Pods are those a scan of every Pod finds, the terminating ones
    ``terminating_pods`` of every slice."""
    pods: dict[Key, Pod] = {}
    slices: dict[Key, EndpointSlice] = {}
    tracked = GatedPods()
    for action, name, arg in steps:
        pods, slices = dict(pods), dict(slices)
        if action == "pod":
            pods[("ns", name)] = _pod(name, bool(arg))
        elif action == "slice":
            slices[("ns", name)] = terminating_slice(name, list(arg))  # type: ignore[call-overload]
        else:
            pods.pop(("ns", name), None)
            slices.pop(("ns", name), None)
        gated, terminating = tracked.update(pods, slices)
        assert dict(gated) == {k: p for k, p in pods.items() if p.gated(LB_READY)}
        assert set(terminating) == terminating_pods(slices)
