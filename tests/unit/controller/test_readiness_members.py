"""``PodMembers`` keeps ``pod_members`` from one pool map to the next, reading only the pools
replaced: over random sequences of pools added, replaced (members moved) and removed, with the
unchanged pools kept as the same objects (as the translator keeps them), it equals
``pod_members`` of the whole map."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podway.controller.readiness import PodMembers, pod_members
from podway.ir import Member, Pool
from podway.model.base import ObjectRef

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
