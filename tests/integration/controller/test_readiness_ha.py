"""The readiness gate with two controller replicas (one Lease, the API emulator): an engine whose
Envoy holds its xDS stream to the follower reports to both replicas, and the leader flips the
pod's gate from that engine's reports (counting an engine of another engine group, known to the
leader only from its reports, for none of the pod's pools); ``podway engine`` given both
replicas reports to both; a new leader judges at once from the reports it already holds.
Real Envoy and a real backend on loopback; every engine, reporter, controller and backend is
stopped in teardown (``Bed.close``), also on failure."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.health_report import Reporter, ReportOptions
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.programs.controller.leader import ElectionSettings
from podway.programs.controller.main import Controller
from tests.e2e.harness import free_port
from tests.waiting import eventually

from .bed import Bed, lb_service
from .test_readiness import CHECKS, backend, gate, gated_pod, not_ready_slice, status_of

pytestmark = pytest.mark.e2e


@dataclass
class Pair:
    """Two replicas on one API, each serving xDS (and member health) on its own unix socket."""

    bed: Bed
    folder: Path
    port: int  # the gated pod's backend port
    leader: Controller | None = None
    follower: Controller | None = None
    apis: list[client.ApiClient] = field(default_factory=list)

    async def replica(self, name: str) -> Controller:
        api = client.ApiClient(client.Configuration(host=self.bed.emu.url))
        api.user_agent = name  # the emulator records each write's agent
        self.apis.append(api)
        election = ElectionSettings(namespace="default", identity=name, lease_duration_s=10,
                                    renew_deadline_s=7.0, retry_period_s=0.2)
        made = Controller(self.bed.options(xds_address=f"unix:{self.folder / name}.sock",
                                           election=election), api=api)
        self.bed.tasks.append(asyncio.create_task(made.run(), name=f"controller-{name}"))
        async with asyncio.timeout(20):
            await made.started.wait()
        return made

    def target(self, replica: Controller | None) -> str:
        assert replica is not None
        assert replica.server is not None
        return replica.server.target


def engines(replica: Controller) -> dict[str, float | None]:
    """``podway_controller_engines`` of one replica, by ``via``."""
    return {via: replica.metrics.registry.get_sample_value("podway_controller_engines",
                                                           {"via": via})
            for via in ("both", "xds_only", "reports_only")}


@pytest.fixture
async def pair(bed: Bed) -> AsyncIterator[Pair]:
    """Replica ``a`` leads (it started alone), ``b`` follows; Service ``web`` has one gated pod
    (not ready) on a backend port nothing listens on yet."""
    folder = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))  # unix socket paths are short
    made = Pair(bed=bed, folder=folder, port=free_port())
    try:
        bed.emu.put("services", lb_service("web", free_port(), made.port, annotations=CHECKS))
        bed.emu.put("pods", gated_pod("web-1", "127.0.0.1"))
        bed.emu.put("endpointslices", not_ready_slice(made.port))
        made.leader = await made.replica("a")
        await eventually(made.leader.leadership.is_leader, within=20)
        made.follower = await made.replica("b")
        yield made
    finally:
        await bed.close()  # engines and reporters first, then the replicas
        for api in made.apis:
            await api.close()
        shutil.rmtree(folder, ignore_errors=True)


async def test_the_leader_flips_the_gate_from_an_engine_on_the_follower_s_xds(pair: Pair) -> None:
    """edge-1's Envoy is configured by the follower only; its reporter reports to both. The
    leader counts it (a report stream, no xDS) and writes True once it finds the pod healthy,
    False (naming edge-1) when the backend dies, True when it is back; the follower writes
    nothing. Each replica's ``podway_controller_engines`` says how it hears edge-1."""
    bed, leader, follower = pair.bed, pair.leader, pair.follower
    assert leader is not None
    assert follower is not None
    engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
        BootstrapOptions(node_id="edge-1", xds=pair.target(follower), delta=True))))
    bed.engines.append(engine)
    bed.tasks.append(asyncio.create_task(engine.run(), name="engine-edge-1"))
    reporter = Reporter(ReportOptions(
        node_id="edge-1", xds=(pair.target(follower), pair.target(leader)), interval_s=0.05,
        backoff=Backoff(base=0.05, cap=0.5)), lambda: engine.admin_address)
    bed.tasks.append(asyncio.create_task(reporter.run(), name="report-edge-1"))
    await engine.wait_ready(limit_s=30)
    await eventually(lambda: leader.health_reports.view("edge-1") is not None, within=30)
    assert leader.server is not None
    assert follower.server is not None
    assert "edge-1" not in leader.server.servicer.engines  # its xDS is the follower's
    assert "edge-1" in follower.server.servicer.engines
    assert follower.leadership.is_leader() is False

    await eventually(lambda: engines(leader) == {"both": 0, "xds_only": 0, "reports_only": 1})
    await eventually(lambda: engines(follower) == {"both": 1, "xds_only": 0, "reports_only": 0})

    task = await backend(pair.port)
    await eventually(lambda: status_of(bed) == "True", within=30)
    assert "1 engine(s)" in str((gate(bed) or {}).get("message"))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await eventually(lambda: status_of(bed) == "False", within=30)
    condition = gate(bed)
    assert condition is not None
    assert condition["reason"] == "Unhealthy"
    assert "engine edge-1" in condition["message"]
    bed.tasks.append(await backend(pair.port))
    await eventually(lambda: status_of(bed) == "True", within=30)
    pods = [w for w in bed.emu.writes if w.plural == "pods"]
    assert len(pods) >= 3
    assert {w.agent for w in pods} == {"a"}


def on_follower(pair: Pair, node_id: str, *, group: str = "") -> Engine:
    """An engine (of ``group``) whose Envoy's xDS is the follower's, reporting to both."""
    bed = pair.bed
    engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
        BootstrapOptions(node_id=node_id, xds=pair.target(pair.follower), delta=True,
                         engine_group=group))))
    bed.engines.append(engine)
    bed.tasks.append(asyncio.create_task(engine.run(), name=f"engine-{node_id}"))
    reporter = Reporter(ReportOptions(
        node_id=node_id, xds=(pair.target(pair.follower), pair.target(pair.leader)),
        interval_s=0.05, backoff=Backoff(base=0.05, cap=0.5), engine_group=group),
        lambda: engine.admin_address)
    bed.tasks.append(asyncio.create_task(reporter.run(), name=f"report-{node_id}"))
    return engine


async def test_the_leader_counts_a_reporting_engine_only_for_its_group_s_pools(
        pair: Pair) -> None:
    """Both engines' xDS is the follower's: the leader knows their groups only from their
    reports. edge-b (group b) is never sent web's pool (group default), so it does not block:
    the pod turns True on edge-1 (no group) alone."""
    bed, leader = pair.bed, pair.leader
    assert leader is not None
    assert leader.server is not None
    for made in (on_follower(pair, "edge-1"), on_follower(pair, "edge-b", group="b")):
        await made.wait_ready(limit_s=30)
    await eventually(lambda: leader.health_reports.nodes == {"edge-1", "edge-b"}, within=30)
    assert dict(leader.health_reports.groups) == {"edge-1": "", "edge-b": "b"}
    assert not leader.server.servicer.engines  # neither engine's xDS is the leader's
    bed.tasks.append(await backend(pair.port))
    await eventually(lambda: status_of(bed) == "True", within=30)
    assert "healthy in 1 engine(s)" in str((gate(bed) or {}).get("message"))


async def test_podway_engine_reports_to_every_replica_it_is_given(pair: Pair) -> None:
    """`podway engine --xds FOLLOWER --xds LEADER`: wherever its Envoy's xDS goes, the leader
    hears its reports (not only the first --xds) and turns the pod True; so does the
    follower's copy of the reports."""
    bed, leader, follower = pair.bed, pair.leader, pair.follower
    assert leader is not None
    assert follower is not None
    bed.tasks.append(await backend(pair.port))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "engine", "--xds", pair.target(follower),
        "--xds", pair.target(leader), "--node-id", "edge-cli", "--drain-s", "0",
        "--health-report-s", "0.1", "--state-dir", str(pair.folder / "e"),
        "--log-level", "warning",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        await eventually(lambda: status_of(bed) == "True", within=40)
        await eventually(lambda: follower.health_reports.view("edge-cli") is not None, within=30)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        if process.returncode is None:  # SIGTERM first: it stops its Envoy (SIGKILL would not)
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
                await process.wait()


async def test_a_new_leader_already_holds_the_engines_reports(pair: Pair) -> None:
    """edge-1's xDS goes to the leader, its reports to both replicas; the pod is True. The
    leader stops (handing the Lease back): the follower leads, edge-1's Envoy keeps its
    configuration without xDS, and when the backend dies the new leader writes False from
    the reports it held all along."""
    bed, old, new = pair.bed, pair.leader, pair.follower
    assert old is not None
    assert new is not None
    engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
        BootstrapOptions(node_id="edge-1", xds=pair.target(old), delta=True))))
    bed.engines.append(engine)
    bed.tasks.append(asyncio.create_task(engine.run(), name="engine-edge-1"))
    reporter = Reporter(ReportOptions(
        node_id="edge-1", xds=(pair.target(old), pair.target(new)), interval_s=0.05,
        backoff=Backoff(base=0.05, cap=0.5)), lambda: engine.admin_address)
    bed.tasks.append(asyncio.create_task(reporter.run(), name="report-edge-1"))
    task = await backend(pair.port)
    await eventually(lambda: status_of(bed) == "True", within=30)
    await eventually(lambda: new.health_reports.view("edge-1") is not None, within=30)

    leading = next(t for t in bed.tasks if t.get_name() == "controller-a")
    leading.cancel()
    await asyncio.gather(leading, return_exceptions=True)
    await eventually(new.leadership.is_leader, within=30)
    assert new.server is not None
    assert "edge-1" not in new.server.servicer.engines  # its Envoy's only xDS went away
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await eventually(lambda: status_of(bed) == "False", within=30)
    assert "engine edge-1" in str((gate(bed) or {}).get("message"))
    assert [w.agent for w in bed.emu.writes if w.plural == "pods"][-1] == "b"
