"""The readiness gate end to end: the controller on the API emulator, real Envoys fed over a unix
xDS socket, each engine's member health reporter, and a real backend. Loopback only; every
engine, reporter and backend is stopped in teardown (``Bed.close``), also on failure."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podway.engines.member_health import Health, HostState, MemberHealthReports, Message
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.health_report import Reporter, ReportOptions
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.model.base import ENGINE_GROUP
from podway.model.core import LB_READY, Pod
from podway.pipeline import State
from podway.programs.controller.main import Controller
from podway.programs.controller.metrics import ControllerMetrics
from podway.programs.controller.readiness import ReadinessGate
from podway.programs.controller.readiness_members import pod_members
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve
from tests.e2e.harness import free_port, started_or_failed
from tests.waiting import eventually

from .bed import Bed, endpoint_slice, lb_service, pod

pytestmark = pytest.mark.e2e

# A TCP pool checked every 200 ms, out at the first failure, back at the first success.
CHECKS = {"podway.io/health-check-interval": "200ms", "podway.io/health-check-timeout": "200ms",
          "podway.io/unhealthy-threshold": "1", "podway.io/healthy-threshold": "1"}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))  # unix socket paths are short
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def gated_pod(name: str, ip: str) -> dict[str, Any]:
    """A running pod waiting for Podway's gate (the kubelet says it is not Ready)."""
    obj = pod(name, ip)
    obj["spec"]["readinessGates"] = [{"conditionType": LB_READY}]
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False",
                                    "reason": "ReadinessGatesNotReady"}]
    return obj


def not_ready_slice(port: int) -> dict[str, Any]:
    """The pod's endpoint as Kubernetes lists a pod that is not Ready (its gate is not True)."""
    obj = endpoint_slice("web", {"web-1": "127.0.0.1"}, port=port)
    obj["endpoints"][0]["conditions"] = {"ready": False, "serving": False,
                                         "terminating": False}
    return obj


def gate(bed: Bed) -> dict[str, Any] | None:
    """The pod's ``podway.io/lb-ready`` condition as the API holds it."""
    found = bed.emu.get("pods", "default", "web-1") or {}
    return next((c for c in (found.get("status") or {}).get("conditions") or []
                 if c.get("type") == LB_READY), None)


def status_of(bed: Bed) -> str | None:
    found = gate(bed)
    return None if found is None else str(found["status"])


async def backend(port: int) -> asyncio.Task[None]:
    started = asyncio.Event()
    task = asyncio.create_task(serve(EchoOptions(port=port, identity=Identity(name="web-1")),
                                     started=started), name="echo-web-1")
    await started_or_failed(task, started)
    return task


async def engine(bed: Bed, node_id: str, *, report: bool = True, group: str = "") -> Engine:
    """A real Envoy on the controller's unix socket (of engine group ``group``, "": none)
    and, with ``report``, its reporter."""
    assert bed.controller is not None
    assert bed.controller.server is not None
    target = bed.controller.server.target
    made = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
        BootstrapOptions(node_id=node_id, xds=target, delta=True, engine_group=group))))
    bed.engines.append(made)
    bed.tasks.append(asyncio.create_task(made.run(), name=f"engine-{node_id}"))
    if report:
        start_reporter(bed, made, node_id, group=group)
    await made.wait_ready(limit_s=30)
    return made


def start_reporter(bed: Bed, made: Engine, node_id: str, *, group: str = "") -> None:
    assert bed.controller is not None
    assert bed.controller.server is not None
    reporter = Reporter(ReportOptions(node_id=node_id, xds=bed.controller.server.target,
                                      interval_s=0.05, engine_group=group),
                        lambda: made.admin_address)
    bed.tasks.append(asyncio.create_task(reporter.run(), name=f"report-{node_id}"))


@pytest.fixture
async def served(bed: Bed, short_dir: Path) -> tuple[Bed, int]:
    """The controller on a unix xDS socket; Service ``web`` with one gated pod (not ready) on a
    backend port nothing listens on yet."""
    port = free_port()
    bed.emu.put("services", lb_service("web", free_port(), port, annotations=CHECKS))
    bed.emu.put("pods", gated_pod("web-1", "127.0.0.1"))
    bed.emu.put("endpointslices", not_ready_slice(port))
    await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}")
    return bed, port


async def test_gate_turns_true_once_the_engine_finds_the_pod_healthy(
        served: tuple[Bed, int]) -> None:
    """A gated pod whose endpoint is not ready is still checked by the engine: its condition is
    False (waiting) while nothing listens, True once the backend answers the checks; the write
    is a strategic merge patch of pods/status that leaves the kubelet's conditions."""
    bed, port = served
    await engine(bed, "edge-1")
    await eventually(lambda: status_of(bed) == "False", within=30)
    assert gate(bed)["reason"] in ("WaitingForEngines", "Unhealthy")  # type: ignore[index]
    task = await backend(port)
    bed.tasks.append(task)
    await eventually(lambda: status_of(bed) == "True", within=30)
    condition = gate(bed)
    assert condition is not None
    assert condition["reason"] == "Healthy"
    assert condition["lastTransitionTime"]
    conditions = bed.emu.get("pods", "default", "web-1")["status"]["conditions"]  # type: ignore[index]
    assert {c["type"] for c in conditions} == {"Ready", LB_READY}
    writes = [p for p in bed.emu.patches if p.plural == "pods"]
    assert writes
    assert all(p.subresource == "status" and "strategic" in p.content_type
                          for p in writes)


async def test_killed_backend_turns_false_and_restored_turns_true(
        served: tuple[Bed, int]) -> None:
    """Healthy → the backend dies → False (Unhealthy, the engine's reason) → it comes back on
    the same port → True again; the transition time moves with each flip."""
    bed, port = served
    task = await backend(port)
    await engine(bed, "edge-1")
    await eventually(lambda: status_of(bed) == "True", within=30)
    first = gate(bed)["lastTransitionTime"]  # type: ignore[index]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await eventually(lambda: status_of(bed) == "False", within=30)
    condition = gate(bed)
    assert condition is not None
    assert condition["reason"] == "Unhealthy"
    assert "edge-1" in condition["message"]
    assert "failed active health check" in \
        condition["message"]
    bed.tasks.append(await backend(port))
    await eventually(lambda: status_of(bed) == "True", within=30)
    assert gate(bed)["lastTransitionTime"] >= first  # type: ignore[index]


async def test_an_engine_that_never_reported_blocks_true(served: tuple[Bed, int]) -> None:
    """Two engines connected before the pod is healthy; only edge-1 reports: the pod stays
    False (waiting for edge-2) although edge-1 finds it healthy. edge-2's reporter starts:
    True."""
    bed, port = served
    await engine(bed, "edge-1")
    silent = await engine(bed, "edge-2", report=False)  # before the pod could turn True
    bed.tasks.append(await backend(port))
    assert bed.controller is not None
    reports = bed.controller.health_reports

    def edge1_healthy() -> bool:
        view = reports.view("edge-1")
        return bool(view) and all(s.health is Health.HEALTHY for s in view.values())

    await eventually(edge1_healthy, within=30)
    await eventually(lambda: "edge-2 has not reported" in str((gate(bed) or {}).get("message")),
                within=30)
    assert status_of(bed) == "False"
    start_reporter(bed, silent, "edge-2")
    await eventually(lambda: status_of(bed) == "True", within=30)


async def test_a_disconnected_engine_stops_counting(served: tuple[Bed, int]) -> None:
    """edge-2 is connected but silent (the pod waits); when edge-2 goes away the pod turns True
    on edge-1's report alone."""
    bed, port = served
    await engine(bed, "edge-1")
    await engine(bed, "edge-2", report=False)
    bed.tasks.append(await backend(port))
    await eventually(lambda: "edge-2 has not reported" in str((gate(bed) or {}).get("message")),
                within=30)
    gone = next(t for t in bed.tasks if t.get_name() == "engine-edge-2")
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    await eventually(lambda: status_of(bed) == "True", within=30)
    assert bed.controller is not None
    assert bed.controller.server is not None
    assert set(bed.controller.server.servicer.engines) == {"edge-1"}


async def test_an_engine_of_another_group_does_not_block_the_gate(
        bed: Bed, short_dir: Path) -> None:
    """Service web is in engine group a. edge-b (group b) is connected and reports before the
    pod is healthy, but is never sent web's pool: the pod turns True on edge-a's report, and
    edge-b's view never has web's member. Each engine counts with the group xDS serves it."""
    port = free_port()
    bed.emu.put("services", lb_service("web", free_port(), port,
                                       annotations={**CHECKS, ENGINE_GROUP: "a"}))
    bed.emu.put("pods", gated_pod("web-1", "127.0.0.1"))
    bed.emu.put("endpointslices", not_ready_slice(port))
    await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}")
    await engine(bed, "edge-b", group="b")
    await engine(bed, "edge-a", group="a")
    assert bed.controller is not None
    assert bed.controller.server is not None
    assert bed.controller.server.servicer.engine_groups == {"edge-a": "a", "edge-b": "b"}
    reports = bed.controller.health_reports
    await eventually(lambda: reports.nodes == {"edge-a", "edge-b"}, within=30)
    assert dict(reports.groups) == {"edge-a": "a", "edge-b": "b"}
    bed.tasks.append(await backend(port))
    await eventually(lambda: status_of(bed) == "True", within=30)
    assert "healthy in 1 engine(s)" in str((gate(bed) or {}).get("message"))
    assert not any(pool.startswith("pool/default/web/")
                   for pool, _ in reports.view("edge-b") or {})


async def _follower(bed: Bed, endpoint_slice: dict[str, Any]) -> State:
    """A controller that never writes the gate itself, serving the gated pod web-1 behind
    ``endpoint_slice``; the first state with web-1 as a member."""
    bed.emu.put("services", lb_service("web", free_port(), 8080, annotations=CHECKS))
    bed.emu.put("pods", gated_pod("web-1", "127.0.0.1"))
    bed.emu.put("endpointslices", endpoint_slice)
    bed.controller = Controller(bed.options(), api=bed.api, writes_allowed=lambda: False)
    bed.tasks.append(asyncio.create_task(bed.controller.run(), name="controller"))
    async with asyncio.timeout(20):
        await bed.controller.started.wait()
    return await bed.until(lambda s: ("default", "web-1") in pod_members(s.ir.pools))


def _reports(state: State, health: HostState) -> MemberHealthReports:
    """Engine e1 reports every member of web-1 with ``health``."""
    reports = MemberHealthReports()
    hosts = pod_members(state.ir.pools)[("default", "web-1")]
    reports.apply(object(), Message(node="e1", full=True, hosts=dict.fromkeys(hosts, health)))
    return reports


async def test_only_a_leader_writes_and_only_what_changed(bed: Bed) -> None:
    """A follower judges but writes nothing; once it leads it writes True (again after a
    refused write), and judging again (before and after the watch shows the write) writes
    nothing more."""
    state = await _follower(bed, not_ready_slice(8080))
    reports = _reports(state, HostState(Health.HEALTHY))
    leader = [False]
    metrics = ControllerMetrics()
    readiness = ReadinessGate(bed.api, bed.pipeline, reports, lambda: {"e1": ""},
                              writes_allowed=lambda: leader[0], metrics=metrics)
    assert await readiness.judge_all(state) == 0
    leader[0] = True
    bed.emu.fail(500, method="PATCH", plural="pods")  # the first write is refused ...
    assert await readiness.judge_all(state) == 1
    assert status_of(bed) is None
    assert await readiness.judge_all(state) == 1  # ... so the next pass writes it again
    assert status_of(bed) == "True"
    assert await readiness.judge_all(state) == 0  # written; the watch has not shown it yet
    shown = await bed.until(lambda s: s.update.snapshot.get(Pod, "default", "web-1")
                            .condition(LB_READY) is not None)  # type: ignore[union-attr]
    assert await readiness.judge_all(shown) == 0
    assert readiness.writes == 1
    text = metrics.render().decode()
    assert 'podway_controller_gated_pods{verdict="Healthy"} 1.0' in text
    assert 'podway_controller_status_writes_total{kind="Pod",result="ok"} 1.0' in text
    assert 'podway_controller_status_writes_total{kind="Pod",result="error"} 1.0' in text


async def test_a_write_judged_before_leadership_was_lost_is_dropped(bed: Bed) -> None:
    """Leadership checked for the pass but gone by the time of the write: nothing is sent and
    the dropped write is counted."""
    state = await _follower(bed, not_ready_slice(8080))
    reports = _reports(state, HostState(Health.HEALTHY))
    answers = iter([True])  # the pass may write; every later ask: no longer the leader
    metrics = ControllerMetrics()
    readiness = ReadinessGate(bed.api, bed.pipeline, reports, lambda: {"e1": ""},
                              writes_allowed=lambda: next(answers, False), metrics=metrics)
    await readiness.judge_all(state)
    assert status_of(bed) is None
    assert readiness.writes == 0
    assert 'podway_controller_fenced_writes_total{writer="readiness"} 1.0' in (
        metrics.render().decode())


async def test_podway_engine_reports_on_its_own(served: tuple[Bed, int], short_dir: Path
                                                ) -> None:
    """The `podway engine` command runs the reporter beside its Envoy: the pod turns True with
    nothing else reporting; its reports name its --engine-group (web's group, default);
    SIGTERM stops the engine cleanly."""
    bed, port = served
    bed.tasks.append(await backend(port))
    assert bed.controller is not None
    assert bed.controller.server is not None
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "engine", "--xds", bed.controller.server.target,
        "--node-id", "edge-cli", "--drain-s", "0", "--health-report-s", "0.1",
        "--engine-group", "default", "--state-dir", str(short_dir / "e"), "--log-level",
        "warning",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        await eventually(lambda: status_of(bed) == "True", within=40)
        assert "1 engine(s)" in str((gate(bed) or {}).get("message"))
        assert bed.controller is not None
        assert bed.controller.health_reports.groups == {"edge-cli": "default"}
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


async def test_a_terminating_pod_is_left_alone(bed: Bed) -> None:
    """An engine finds the member failing as the pod stops, but its endpoint is terminating:
    no write (the pod is going away)."""
    terminating = not_ready_slice(8080)
    terminating["endpoints"][0]["conditions"] = {"ready": False, "serving": True,
                                                 "terminating": True}
    state = await _follower(bed, terminating)
    reports = _reports(state, HostState(Health.UNHEALTHY, "failed active health check"))
    readiness = ReadinessGate(bed.api, bed.pipeline, reports, lambda: {"e1": ""})
    assert await readiness.judge_all(state) == 0
    assert status_of(bed) is None
