"""Init containers in the lab's kubelet (issue 29): run in order, each to completion before the
next, the app containers only after all; a failure is retried (restartPolicy Always/OnFailure)
or fails the pod (Never); a native sidecar starts and the next one follows at once; the status
is the kubelet's (``initContainerStatuses``, the ``Initialized`` condition, phase Pending)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from podway.programs.lab import init_containers
from podway.programs.lab.container_volumes import ContainerError
from podway.programs.lab.init_containers import InitRun, initialize, statuses
from podway.programs.lab.podstatus import pod_conditions

Obj = dict[str, Any]


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(init_containers, "BACKOFF_START_S", 0.01)
    monkeypatch.setattr(init_containers, "BACKOFF_MAX_S", 0.02)


def specs(*names: str, sidecars: tuple[str, ...] = ()) -> list[Obj]:
    return [{"name": n, "image": "podway:t",
             **({"restartPolicy": "Always"} if n in sidecars else {})} for n in names]


class Fake:
    """A launcher that records what ran, in order, with exit statuses to give per name."""

    def __init__(self, codes: dict[str, list[int | Exception]] | None = None) -> None:
        self.codes = codes or {}
        self.ran: list[str] = []
        self.sidecars: list[str] = []
        self.changes = 0
        self.snapshots: list[list[Obj]] = []
        self.run: InitRun | None = None

    async def launch(self, spec: Obj) -> int:
        name = str(spec["name"])
        self.ran.append(name)
        assert self.run is not None
        self.snapshots.append(statuses(self.run))  # what a status write shows meanwhile
        queue = self.codes.get(name) or []
        outcome = queue.pop(0) if queue else 0
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def sidecar(self, spec: Obj) -> None:
        self.sidecars.append(str(spec["name"]))
        queue = self.codes.get(str(spec["name"])) or []
        if queue and isinstance(queue[0], Exception):
            raise queue.pop(0)

    def changed(self) -> None:
        self.changes += 1


async def go(run: InitRun, fake: Fake) -> bool:
    fake.run = run
    return await asyncio.wait_for(initialize(run, launch=fake.launch,
                                             start_sidecar=fake.sidecar,
                                             changed=fake.changed), 5)


def state_of(items: list[Obj], name: str) -> Obj:
    return next(i for i in items if i["name"] == name)


async def test_each_runs_to_completion_in_order_and_the_status_follows() -> None:
    run = InitRun(specs=specs("a", "b", "c"), never=False)
    fake = Fake()
    assert await go(run, fake)
    assert fake.ran == ["a", "b", "c"]
    # While b ran, a had completed and c had not started.
    during_b = fake.snapshots[1]
    assert state_of(during_b, "a")["state"]["terminated"]["reason"] == "Completed"
    assert state_of(during_b, "a")["ready"] is True
    assert "running" in state_of(during_b, "b")["state"]
    assert state_of(during_b, "c")["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert run.complete
    assert run.phase() == "Running"
    assert run.pending() == ()
    done = statuses(run)
    assert all(s["state"]["terminated"]["exitCode"] == 0 for s in done)


async def test_a_failure_is_retried_and_holds_the_next_back() -> None:
    run = InitRun(specs=specs("a", "b"), never=False)
    fake = Fake({"a": [1, 1, 0]})
    assert await go(run, fake)
    assert fake.ran == ["a", "a", "a", "b"]
    assert run.restarts == {"a": 2}
    assert state_of(statuses(run), "a")["restartCount"] == 2
    # The second run's status: backing off showed the failed run as lastState.
    second = state_of(fake.snapshots[1], "a")
    assert second["lastState"]["terminated"] == {**second["lastState"]["terminated"],
                                                 "exitCode": 1, "reason": "Error"}


async def test_a_container_that_cannot_be_made_waits_with_its_reason() -> None:
    run = InitRun(specs=specs("a", "b"), never=True)
    fake = Fake({"a": [ContainerError("secret 'x' not found"), 0]})
    seen: list[Obj] = []

    def changed() -> None:
        if run.waiting:
            seen.append(state_of(statuses(run), "a")["state"])

    fake.changed = changed  # type: ignore[method-assign]
    assert await go(run, fake)  # retried, even under Never: nothing ran yet
    assert seen == [{"waiting": {"reason": "CreateContainerConfigError",
                                 "message": "secret 'x' not found"}}]
    assert fake.ran == ["a", "a", "b"]


async def test_under_never_a_failure_fails_the_pod() -> None:
    run = InitRun(specs=specs("a", "b"), never=True)
    fake = Fake({"a": [3]})
    assert not await go(run, fake)
    assert fake.ran == ["a"]
    assert run.failed
    assert run.phase() == "Failed"
    a = state_of(statuses(run), "a")
    assert a["state"]["terminated"]["exitCode"] == 3
    assert a["restartCount"] == 0
    assert run.pending() == ("a", "b")


async def test_a_native_sidecar_starts_and_the_next_follows_at_once() -> None:
    run = InitRun(specs=specs("setup", "side", "last", sidecars=("side",)), never=False)
    fake = Fake()
    assert await go(run, fake)
    assert fake.ran == ["setup", "last"]
    assert fake.sidecars == ["side"]
    side = state_of(statuses(run), "side")
    assert "running" in side["state"]
    assert side["started"]
    assert side["ready"]
    assert "lastState" not in side


def test_initialized_is_false_until_every_init_container_completed() -> None:
    pod: Obj = {"spec": {}, "status": {"conditions": []}}
    pending = {c["type"]: c for c in pod_conditions(pod, containers_ready=False,
                                                    uninitialized=("b", "c"))}
    assert pending["Initialized"]["status"] == "False"
    assert pending["Initialized"]["reason"] == "ContainersNotInitialized"
    assert pending["Initialized"]["message"] == "containers with incomplete status: [b c]"
    assert pending["Ready"]["status"] == "False"
    done = {c["type"]: c for c in pod_conditions(pod, containers_ready=True)}
    assert done["Initialized"]["status"] == "True"


def test_before_any_run_every_one_waits_for_initialization() -> None:
    run = InitRun(specs=specs("a", "b"), never=False)
    assert [s["state"] for s in statuses(run)] == [{"waiting": {"reason": "PodInitializing"}}] * 2
    assert run.phase() == "Pending"


async def test_a_sidecar_that_cannot_be_made_waits_and_is_tried_again() -> None:
    run = InitRun(specs=specs("side", "last", sidecars=("side",)), never=True)
    fake = Fake({"side": [ContainerError("configmap 'c' not found")]})
    assert await go(run, fake)
    assert fake.sidecars == ["side", "side"]
    assert fake.ran == ["last"]
    assert run.waiting == ""
