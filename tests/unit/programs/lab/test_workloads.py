"""The lab's workload controllers as pure decisions (issue 29.2): a Deployment rolls out through
ReplicaSets within maxSurge/maxUnavailable, Recreate never overlaps old and new pods, the status
is what ``kubectl rollout status``/``wait`` read, DaemonSets keep one pod per fitting node."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from podway.programs.lab import workloads
from podway.programs.lab.cluster import key, pod_ready, template_hash

Obj = dict[str, Any]


def deployment(replicas: int = 4, *, strategy: Obj | None = None, image: str = "v1") -> Obj:
    return {"metadata": {"name": "web", "namespace": "default", "uid": "d-1", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": strategy or {},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


class World:
    """The store plus a kubelet that makes a new pod Ready one step after it appears and
    removes a terminating pod one step after it was marked."""

    def __init__(self) -> None:
        self.sets: dict[tuple[str, str], Obj] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.uids = itertools.count(1)

    def _uid(self) -> str:
        return f"{next(self.uids):08x}-0000"

    def step(self, deploy: Obj) -> None:
        for pod in list(self.pods.values()):  # the kubelet's turn
            if pod["metadata"].get("deletionTimestamp"):
                del self.pods[key(pod)]
            else:
                pod["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        mine = [rs for rs in self.sets.values() if workloads.owned(rs, deploy)]
        for rs in workloads.rollout(deploy, mine, list(self.pods.values())):
            rs["metadata"].setdefault("uid", self._uid())
            self.sets[key(rs)] = rs
        for rs in list(self.sets.values()):
            create, delete = workloads.replicaset_pods(rs, list(self.pods.values()))
            for pod in create:
                pod["metadata"]["uid"] = self._uid()
                pod["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{len(self.pods):02d}Z"
                pod["spec"]["nodeName"] = "n1"
                self.pods[key(pod)] = pod
            for k in delete:
                self.pods[k]["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"

    def live(self) -> list[Obj]:
        return [p for p in self.pods.values() if not p["metadata"].get("deletionTimestamp")]

    def image_of(self, pod: Obj) -> str:
        return str(pod["spec"]["containers"][0]["image"])


def settle(world: World, deploy: Obj, steps: int = 30) -> list[tuple[int, int, set[str]]]:
    """Run until nothing changes; each step's (live pods, ready live pods, images live)."""
    seen = []
    for _ in range(steps):
        world.step(deploy)
        live = world.live()
        seen.append((len(live), sum(1 for p in live if pod_ready(p)),
                     {world.image_of(p) for p in live}))
    return seen


def test_rolling_update_stays_within_surge_and_unavailable_and_completes() -> None:
    world = World()
    settle(world, deployment(4))
    assert len(world.live()) == 4
    first = set(world.sets)
    status = workloads.deployment_status(deployment(4), list(world.sets.values()),
                                         list(world.pods.values()))
    assert {c["type"]: c["reason"] for c in status["conditions"]} == {
        "Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}
    assert status["updatedReplicas"] == status["availableReplicas"] == 4

    new = deployment(4, image="v2")  # defaults: maxSurge 25 % (1), maxUnavailable 25 % (1)
    seen = settle(world, new)
    assert max(n for n, _, _ in seen) <= 5
    assert min(ready for _, ready, _ in seen) >= 3
    assert any(images == {"v1", "v2"} for _, _, images in seen)  # a rollout, not a swap
    assert seen[-1] == (4, 4, {"v2"})
    assert len(world.sets) == 2
    assert [rs["spec"]["replicas"] for k, rs in world.sets.items() if k in first] == [0]
    revisions = sorted(rs["metadata"]["annotations"][workloads.REVISION]
                       for rs in world.sets.values())
    assert revisions == ["1", "2"]
    status = workloads.deployment_status(new, list(world.sets.values()),
                                         list(world.pods.values()))
    assert status["replicas"] == status["updatedReplicas"] == 4
    assert status["conditions"][1]["reason"] == "NewReplicaSetAvailable"
    # Back to the first template (rollout undo): its ReplicaSet scales up again and becomes
    # revision 3; no third ReplicaSet.
    seen = settle(world, deployment(4))
    assert seen[-1] == (4, 4, {"v1"})
    assert sorted(rs["metadata"]["annotations"][workloads.REVISION]
                  for rs in world.sets.values()) == ["2", "3"]
    assert workloads.deployment_revision(deployment(4), list(world.sets.values())) == "3"


def test_rolling_update_without_surge_never_exceeds_replicas() -> None:
    world = World()
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    settle(world, deployment(3, strategy=strategy))
    seen = settle(world, deployment(3, strategy=strategy, image="v2"))
    assert max(n for n, _, _ in seen) <= 3
    assert min(ready for _, ready, _ in seen) >= 2
    assert seen[-1] == (3, 3, {"v2"})


def test_recreate_stops_every_old_pod_before_the_first_new_one() -> None:
    world = World()
    strategy = {"type": "Recreate"}
    settle(world, deployment(3, strategy=strategy))
    old_pods = set(world.pods)
    for _ in range(20):
        world.step(deployment(3, strategy=strategy, image="v2"))
        images = {world.image_of(p) for p in world.pods.values()}  # terminating ones too
        assert images != {"v1", "v2"}
    assert {world.image_of(p) for p in world.live()} == {"v2"}
    assert not old_pods & set(world.pods)


def test_status_while_progressing_is_what_rollout_status_waits_on() -> None:
    world = World()
    settle(world, deployment(2))
    new = deployment(2, image="v2")
    new["metadata"]["generation"] = 2
    world.step(new)
    status = workloads.deployment_status(new, list(world.sets.values()),
                                         list(world.pods.values()))
    assert status["observedGeneration"] == 2
    assert status["updatedReplicas"] < 2
    assert status["conditions"][1]["reason"] == "ReplicaSetUpdated"
    assert status["conditions"][0]["status"] == "True"  # 1 of 2 may be unavailable (25 %: 0)
    # Condition times stay put while nothing changes (status writes settle).
    again = workloads.deployment_status(new, list(world.sets.values()),
                                        list(world.pods.values()), status)
    assert again == status


def test_scale_down_removes_unready_then_newest_pods() -> None:
    world = World()
    settle(world, deployment(3))
    rs = next(iter(world.sets.values()))
    pods = sorted(world.pods.values(), key=lambda p: p["metadata"]["creationTimestamp"])
    pods[0]["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
    rs["spec"]["replicas"] = 1
    _, delete = workloads.replicaset_pods(rs, pods)
    assert delete == [key(pods[0]), key(pods[2])]


@pytest.mark.parametrize(("value", "up", "expected"), [
    (None, True, 1), (None, False, 0), ("50%", True, 2), ("30%", False, 0), (2, True, 2)])
def test_surge_and_unavailable_rounding(value: Any, up: bool, expected: int) -> None:
    assert workloads.scaled(value, 3, up=up) == expected


def node(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": labels}}


def test_daemonset_one_pod_per_fitting_node_and_rolls_one_at_a_time() -> None:
    nodes = [node("n1", edge="yes"), node("n2", edge="yes"), node("n3")]
    ds = {"metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-1",
                       "generation": 1},
          "spec": {"selector": {"matchLabels": {"app": "agent"}},
                   "template": {"metadata": {"labels": {"app": "agent"}},
                                "spec": {"nodeSelector": {"edge": "yes"},
                                         "containers": [{"name": "a", "image": "v1"}]}}}}
    create, delete = workloads.daemonset_pods(ds, nodes, [])
    assert sorted(p["spec"]["nodeName"] for p in create) == ["n1", "n2"]
    assert delete == []
    pods = []
    for n, pod in enumerate(create):
        pod["metadata"].update(uid=f"{n + 1:08x}-0", name=f"agent-{n}")
        pod["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        pods.append(pod)
    assert workloads.daemonset_pods(ds, nodes, pods) == ([], [])
    status = workloads.daemonset_status(ds, nodes, pods)
    assert (status["desiredNumberScheduled"], status["numberReady"],
            status["updatedNumberScheduled"]) == (2, 2, 2)
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "v2"
    assert template_hash(ds) != pods[0]["metadata"]["labels"][workloads.DS_HASH]
    create, delete = workloads.daemonset_pods(ds, nodes, pods)
    assert create == []
    assert len(delete) == 1  # maxUnavailable 1: one node at a time
