"""Several controller replicas on one API (in one process, each with its own client): exactly
one writes, every one serves xDS, a new leader writes what is pending and only that,
``--leader-elect=false`` always writes and never touches a Lease, and a pass prepared before the
Lease was lost sends nothing more."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator
from podway.pipeline import Pipeline
from podway.programs.controller.leader import ElectionSettings, Fence
from podway.programs.controller.main import Controller
from podway.programs.controller.metrics import ControllerMetrics
from podway.programs.controller.status import StatusWriter
from podway.programs.ipam import Pool, parse_pools
from podway.translate import BackendMode
from tests.waiting import eventually

from .bed import Bed, lb_service, options, stop_task

Obj = dict[str, Any]


@dataclass
class Fleet:
    emu: KubeEmulator
    replicas: dict[str, Controller] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    apis: list[client.ApiClient] = field(default_factory=list)

    async def start(self, name: str, *, elect: bool = True,
                    mode: BackendMode = BackendMode.CLUSTERIP, vip_pools: tuple[Pool, ...] = (),
                    **timing: Any) -> Controller:
        api = client.ApiClient(client.Configuration(host=self.emu.url))
        api.user_agent = name  # the emulator counts writes per replica by it
        self.apis.append(api)
        bed = Bed(emu=self.emu, api=api, translate=options(mode))
        election = ElectionSettings(namespace="default", identity=name, **{
            "lease_duration_s": 10, "renew_deadline_s": 7.0, "retry_period_s": 0.2,
            **timing}) if elect else None
        controller = Controller(bed.options(election=election, vip_pools=vip_pools), api=api)
        self.replicas[name] = controller
        self.tasks[name] = asyncio.create_task(controller.run(), name=f"controller-{name}")
        async with asyncio.timeout(20):
            await controller.started.wait()
        return controller

    async def stop(self, name: str) -> None:
        await stop_task(self.tasks.pop(name))

    def writes(self, agent: str, *, leases: bool = False) -> list[Any]:
        return [w for w in self.emu.writes if w.agent == agent
                and (leases or w.plural != "leases")]


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    async with KubeEmulator() as emu:
        made = Fleet(emu)
        try:
            yield made
        finally:
            for task in made.tasks.values():
                task.cancel()
            await asyncio.gather(*made.tasks.values(), return_exceptions=True)
            for api in made.apis:
                await api.close()


def lb_ip(emu: KubeEmulator, name: str) -> Any:
    obj = emu.get("services", "default", name) or {}
    return ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")


def gauge(controller: Controller, name: str, **labels: str) -> float | None:
    return controller.metrics.registry.get_sample_value(name, labels or None)


async def leader_of(fleet: Fleet) -> str:
    async with asyncio.timeout(20):
        while True:
            leading = [n for n, c in fleet.replicas.items() if c.leadership.is_leader()]
            if leading:
                return leading[0]
            await asyncio.sleep(0.02)


async def test_two_replicas_exactly_one_writes_both_serve(fleet: Fleet) -> None:
    """Two replicas in nodeportlocal mode: the leader writes every status, event and
    NodePortLocal opt-in annotation, the follower none (its events are dropped by the fence)
    yet translates the same listeners for its own engines."""
    fleet.emu.put("services", lb_service("web", 9001))
    for name in ("a", "b"):
        await fleet.start(name, mode=BackendMode.NODEPORTLOCAL)
    leader = await leader_of(fleet)
    follower = "b" if leader == "a" else "a"
    await eventually(lambda: bool(lb_ip(fleet.emu, "web")))
    fleet.emu.put("services", lb_service("api", 9002))
    await eventually(lambda: bool(lb_ip(fleet.emu, "api")))
    other = fleet.replicas[follower]
    assert other.pipeline is not None
    async with asyncio.timeout(15):
        await other.pipeline.wait_for(lambda s: len(s.ir.listeners) == 2)
    await eventually(lambda: (gauge(other, "podway_controller_fenced_writes_total",
                               writer="event") or 0) >= 2)  # its Synced events, dropped
    assert fleet.writes(follower) == []
    assert {(w.plural, w.subresource) for w in fleet.writes(leader)} >= {
        ("services", "status"), ("services", ""), ("events", "")}  # "": the NPL annotation
    assert gauge(fleet.replicas[leader], "podway_controller_leader") == 1
    assert gauge(other, "podway_controller_leader") == 0
    assert other.server is not None
    assert other.server.target  # it serves xDS all the same


async def test_a_new_leader_writes_what_is_pending_and_only_that(fleet: Fleet) -> None:
    """The leader stops (handing the Lease back); a Service created meanwhile gets its status
    from the new leader, which PATCHes nothing the old one had already written."""
    fleet.emu.put("services", lb_service("web", 9001))
    await fleet.start("a")
    await eventually(fleet.replicas["a"].leadership.is_leader)
    await fleet.start("b")
    await eventually(lambda: bool(lb_ip(fleet.emu, "web")))
    await fleet.stop("a")
    fleet.emu.put("services", lb_service("late", 9002))
    await eventually(lambda: bool(lb_ip(fleet.emu, "late")))
    status = [(w.name, w.subresource) for w in fleet.writes("b") if w.plural == "services"]
    assert status == [("late", "status")]
    lease = fleet.emu.get("leases", "default", "podway-controller",
                          group="coordination.k8s.io")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "b"


async def test_a_new_leader_writes_pending_status_with_no_new_change(fleet: Fleet) -> None:
    """The leader could not write a status (the API refused it) when it stopped; nothing in
    the cluster changes afterwards, yet the new leader writes it as soon as it leads."""
    fleet.emu.put("services", lb_service("web", 9001))
    await fleet.start("a")
    await eventually(fleet.replicas["a"].leadership.is_leader)
    b = await fleet.start("b")
    await eventually(lambda: bool(lb_ip(fleet.emu, "web")))
    fleet.emu.fail(500, method="PATCH", plural="services", times=10_000)
    fleet.emu.put("services", lb_service("late", 9002))
    await eventually(lambda: fleet.emu.count("patch", "services", "default", "late", "status") > 0)
    assert b.pipeline is not None
    async with asyncio.timeout(15):
        await b.pipeline.wait_for(lambda s: len(s.ir.listeners) == 2)
    await fleet.stop("a")
    fleet.emu.clear_faults()
    await eventually(lambda: bool(lb_ip(fleet.emu, "late")))
    assert [(w.name, w.subresource) for w in fleet.writes("b") if w.plural == "services"] == [
        ("late", "status")]


async def test_a_new_leader_keeps_the_vip_allocations_and_writes_only_new_ones(
        fleet: Fleet) -> None:
    """With VIP pools: the follower binds the same VIPs the leader allocated (same xDS); after
    the leader stops, the new one keeps every allocation (read back from status), gives a
    Service created meanwhile the next free address, and PATCHes only that one."""
    pools = parse_pools({"pools": [{"name": "p", "addresses": ["198.18.7.1-198.18.7.3"]}]})
    for name in ("a", "b"):
        fleet.emu.put("services", lb_service(name, 9000))
    await fleet.start("one", vip_pools=pools)
    await eventually(fleet.replicas["one"].leadership.is_leader)
    two = await fleet.start("two", vip_pools=pools)
    await eventually(lambda: lb_ip(fleet.emu, "a") == [{"ip": "198.18.7.1"}])
    await eventually(lambda: lb_ip(fleet.emu, "b") == [{"ip": "198.18.7.2"}])
    assert two.pipeline is not None
    async with asyncio.timeout(15):
        await two.pipeline.wait_for(lambda s: {ls.address for ls in s.ir.listeners}
                                    == {"198.18.7.1", "198.18.7.2"})
    await fleet.stop("one")
    fleet.emu.put("services", lb_service("c", 9000))
    await eventually(lambda: lb_ip(fleet.emu, "c") == [{"ip": "198.18.7.3"}])
    assert lb_ip(fleet.emu, "a") == [{"ip": "198.18.7.1"}]
    assert lb_ip(fleet.emu, "b") == [{"ip": "198.18.7.2"}]
    assert {w.name for w in fleet.writes("two") if w.plural == "services"} == {"c"}


async def test_leader_elect_false_always_writes_and_never_touches_a_lease(
        fleet: Fleet) -> None:
    """--leader-elect=false: the replica writes at once, its gauge says 1, no Lease request."""
    fleet.emu.put("services", lb_service("web", 9001))
    solo = await fleet.start("solo", elect=False)
    await eventually(lambda: bool(lb_ip(fleet.emu, "web")))
    assert gauge(solo, "podway_controller_leader") == 1
    assert not [r for r in fleet.emu.requests if "/leases" in r]


class Flaky:
    """A Leadership whose fences stay valid for ``checks`` more checks, then are void (the
    Lease lost in the middle of a pass); ``regain`` starts a new term."""

    def __init__(self, checks: int) -> None:
        self.checks = checks
        self.term = 1

    def _valid(self, term: int) -> bool:
        self.checks -= 1
        return term == self.term and self.checks >= 0

    def is_leader(self) -> bool:
        return self.checks > 0

    def fence(self) -> Fence:
        return Fence(self.term, self._valid)

    async def wait_leader(self, *, after_term: int = 0) -> Fence:
        return self.fence()

    def regain(self) -> None:
        self.term += 1
        self.checks = 1_000


async def test_writes_of_a_pass_begun_before_the_loss_are_dropped(
        bed: Bed, caplog: pytest.LogCaptureFixture) -> None:
    """Three statuses due, one PATCH at a time; the Lease is lost after the first: the other
    two are not sent (counted as fenced). In a new term, after ``resync``, the writer sends
    just the two that the API lacks."""
    for name, port in (("a", 9001), ("b", 9002), ("c", 9003)):
        bed.emu.put("services", lb_service(name, port))
    await bed.start(write_events=False)
    state = await bed.until(lambda s: len(s.ir.listeners) == 3)
    controller = bed.controller
    assert controller is not None
    assert controller.source is not None
    await eventually(lambda: all(lb_ip(bed.emu, n) for n in "abc"))
    await bed.stop_controller()
    for name in "abc":  # the API forgets what the first controller wrote
        obj = bed.emu.get("services", "default", name)
        assert obj is not None
        obj.pop("status")
        bed.emu.put("services", obj)
    # A fresh source would see the cleared statuses; this writer reads them from the emulator.
    leadership = Flaky(checks=2)  # the pass's own check, then one PATCH
    metrics = ControllerMetrics()

    def current(kind: str, key: tuple[str, str]) -> Obj | None:
        found = bed.emu.get("services", *key)
        return None if found is None else found.get("status")

    writer = StatusWriter(bed.api, Pipeline(controller.source, translate=bed.translate),
                          current=current, kind_info=controller.source.kind_info,
                          opts=bed.translate, lb_address="198.18.0.100", metrics=metrics,
                          concurrency=1, leadership=leadership)
    caplog.set_level(logging.WARNING, logger="podway.programs.controller.status")

    def refused() -> str:
        """Why a PATCH failed, if one did: the error count and the writer's warnings."""
        count = metrics.registry.get_sample_value("podway_controller_status_writes_total",
                                                  {"kind": "Service", "result": "error"})
        return f"{count or 0:.0f} failed: " + "; ".join(
            r.getMessage() for r in caplog.records if r.name == "podway.programs.controller.status")

    before = len(bed.emu.writes)
    assert await writer.write(state) == 3
    sent = [(w.verb, w.subresource) for w in bed.emu.writes[before:]]
    assert sent == [("patch", "status")], f"sent {sent}; {refused()}"
    assert metrics.registry.get_sample_value("podway_controller_fenced_writes_total",
                                             {"writer": "status"}) == 2
    leadership.regain()
    await writer.resync()
    assert await writer.write(state) == 2, refused()  # the first one is current at the API
    assert all(lb_ip(bed.emu, n) for n in "abc"), refused()
