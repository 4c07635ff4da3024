"""Leader election against the API emulator: one leader among candidates, the Lease as client-go
writes it, a clean hand-back, a leader that cannot renew stops writing at its deadline — at
once, by the clock, before its loop notices — and a write prepared in a lost term is dropped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator
from podway.programs.controller.leader import ElectionSettings, LeaseElector
from podway.programs.controller.metrics import ControllerMetrics
from tests.waiting import eventually

LEASE = ("leases", "default", "podway-controller")
GROUP = "coordination.k8s.io"


class Clock:
    """A monotonic clock a test moves by hand (None: follow the real one plus ``skew``)."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return asyncio.get_running_loop().time() + self.skew


@dataclass
class Replicas:
    emu: KubeEmulator
    electors: list[LeaseElector] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    apis: list[client.ApiClient] = field(default_factory=list)

    def start(self, identity: str, *, clock: Callable[[], float] | None = None,
              **timing: Any) -> LeaseElector:
        api = client.ApiClient(client.Configuration(host=self.emu.url))
        api.user_agent = identity
        settings = ElectionSettings(namespace="default", identity=identity,
                                    **{"lease_duration_s": 6, "renew_deadline_s": 4.0,
                                       "retry_period_s": 0.2, **timing})
        elector = LeaseElector(api, settings, metrics=ControllerMetrics(),
                               **({"clock": clock} if clock else {}))
        self.apis.append(api)
        self.electors.append(elector)
        self.tasks.append(asyncio.create_task(elector.run(), name=f"elector-{identity}"))
        return elector

    async def stop(self, elector: LeaseElector) -> None:
        task = self.tasks[self.electors.index(elector)]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def lease(self) -> dict[str, Any]:
        return self.lease_named(LEASE[2])

    def lease_named(self, name: str) -> dict[str, Any]:
        found = self.emu.get("leases", "default", name, group=GROUP)
        assert found is not None
        return dict(found["spec"])


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    async with KubeEmulator() as emu:
        made = Replicas(emu)
        try:
            yield made
        finally:
            for task in made.tasks:
                task.cancel()
            await asyncio.gather(*made.tasks, return_exceptions=True)
            for api in made.apis:
                await api.close()


async def leader_among(electors: list[LeaseElector]) -> LeaseElector:
    """The first elector to lead (event-driven: each one's wait_leader)."""
    waits = {asyncio.ensure_future(e.wait_leader()): e for e in electors}
    try:
        async with asyncio.timeout(20):
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    return waits[next(iter(done))]




async def test_one_leader_among_candidates_started_together(replicas: Replicas) -> None:
    """Three candidates racing for a Lease that does not exist: one creates it (the others'
    create is 409), all agree on the holder, the record is client-go's."""
    electors = [replicas.start(name) for name in ("a", "b", "c")]
    leader = await leader_among(electors)
    await eventually(lambda: all(e.holder == leader.settings.identity for e in electors))
    assert [e.is_leader() for e in electors].count(True) == 1
    spec = replicas.lease()
    assert spec["holderIdentity"] == leader.settings.identity
    assert spec["leaseDurationSeconds"] == 6
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"].endswith("Z")
    assert spec["renewTime"] >= spec["acquireTime"]
    creates = [w for w in replicas.emu.writes if w.plural == "leases" and w.verb == "create"]
    assert len(creates) >= 1
    assert sum(w.agent == leader.settings.identity for w in creates) == 1


async def test_the_leader_renews_and_followers_wait(replicas: Replicas) -> None:
    """The leader moves renewTime (updates with the resourceVersion it read); a follower never
    takes a lease that keeps being renewed."""
    a = replicas.start("a")
    await a.wait_leader()
    b = replicas.start("b")
    first = replicas.lease()["renewTime"]
    await eventually(lambda: replicas.lease()["renewTime"] > first)
    await eventually(lambda: b.holder == "a")
    renewals = sum(w.agent == "a" and w.verb == "update" for w in replicas.emu.writes)
    await eventually(lambda: sum(w.agent == "a" and w.verb == "update"
                            for w in replicas.emu.writes) >= renewals + 3)
    assert not b.is_leader()
    assert not [w for w in replicas.emu.writes if w.agent == "b"]


async def test_a_leader_that_stops_hands_the_lease_back(replicas: Replicas) -> None:
    """Cancelled, the leader stops writing and releases the Lease: the follower takes it long
    before the (60 s) lease would have expired, with one more transition."""
    a = replicas.start("a", lease_duration_s=60, renew_deadline_s=40.0)
    await a.wait_leader()
    b = replicas.start("b", lease_duration_s=60, renew_deadline_s=40.0)
    await eventually(lambda: b.holder == "a")
    await replicas.stop(a)
    assert not a.is_leader()
    async with asyncio.timeout(20):
        await b.wait_leader()
    spec = replicas.lease()
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)


async def test_a_leader_past_its_renew_deadline_stops_writing_at_once(
        replicas: Replicas) -> None:
    """The clock jumps past the renew deadline (as for a SIGSTOP-ed process): before the loop
    runs again, is_leader is False and every fence of that term is void; when it renews again
    it starts a new term, and the old fence stays void."""
    clock = Clock()
    a = replicas.start("a", clock=clock)
    fence = await a.wait_leader()
    assert fence.valid()
    clock.skew += 4.5  # past the 4 s renew deadline, no await in between
    assert not a.is_leader()
    assert not fence.valid()
    assert not a.fence().valid()
    renewed = await a.wait_leader(after_term=fence.term)
    assert renewed.term == fence.term + 1
    assert renewed.valid()
    assert not fence.valid()


async def test_a_leader_cut_off_from_the_api_steps_down_and_comes_back(
        replicas: Replicas) -> None:
    """Every Lease request refused: the leader's gauge drops to 0 at the deadline and a "lost"
    transition is counted; once the API answers again it leads again (nobody took over)."""
    a = replicas.start("a", lease_duration_s=4, renew_deadline_s=3.0, retry_period_s=0.2)
    value = a.metrics.registry.get_sample_value

    def count(change: str) -> float:
        return value("podway_controller_leader_transitions_total", {"change": change}) or 0.0

    fence = await a.wait_leader()
    lost, acquired = count("lost"), count("acquired")  # a loaded machine may have flapped
    replicas.emu.fail(503, plural="leases", times=10_000)
    await eventually(lambda: value("podway_controller_leader") == 0)
    assert not fence.valid()
    assert count("lost") == lost + 1
    replicas.emu.clear_faults()
    again = await a.wait_leader(after_term=fence.term)
    assert again.valid()
    assert value("podway_controller_leader") == 1
    assert count("acquired") >= acquired + 1


async def test_a_lease_taken_behind_the_leaders_back_ends_its_term(replicas: Replicas) -> None:
    """Someone else's record in the Lease (written over the leader's): the leader's next renew
    sees a live lease of another holder, does not overwrite it, and stops at once — long
    before its 20 s renew deadline."""
    a = replicas.start("a", lease_duration_s=30, renew_deadline_s=20.0, retry_period_s=0.2)
    fence = await a.wait_leader()
    found = replicas.emu.get(*LEASE, group=GROUP)
    assert found is not None
    found["spec"] = {**found["spec"], "holderIdentity": "intruder"}
    replicas.emu.put("leases", found, group=GROUP)
    await eventually(lambda: not fence.valid() and a.holder == "intruder", within=10)
    await eventually(lambda: a.metrics.registry.get_sample_value("podway_controller_leader") == 0)
    assert replicas.lease()["holderIdentity"] == "intruder"


async def test_the_emulator_keeps_lease_writes_consistent(replicas: Replicas) -> None:
    """What the election relies on: a second create is 409 AlreadyExists, an update with a
    stale resourceVersion is 409 Conflict, one with the current version succeeds."""
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 5}}
    async with client.ApiClient(client.Configuration(host=replicas.emu.url)) as api:
        leases = client.CoordinationV1Api(api)
        created = await leases.create_namespaced_lease("default", body)
        with pytest.raises(client.exceptions.ApiException) as again:
            await leases.create_namespaced_lease("default", body)
        assert again.value.status == 409
        current = await leases.read_namespaced_lease("x", "default")
        current.spec.holder_identity = "b"
        await leases.replace_namespaced_lease("x", "default", current)
        created.spec.holder_identity = "c"  # its resourceVersion is the old one
        with pytest.raises(client.exceptions.ApiException) as stale:
            await leases.replace_namespaced_lease("x", "default", created)
        assert stale.value.status == 409
    assert replicas.lease_named("x")["holderIdentity"] == "b"
