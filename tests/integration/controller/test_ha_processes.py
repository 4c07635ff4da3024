"""Two ``podway controller`` processes on the API emulator, one real Envoy engine given both
xDS addresses, traffic through it: SIGKILL the leader under load and nothing fails (the engine
keeps its config and reconnects to the other replica, which takes the Lease no earlier than the
lease duration allows and writes the status left pending); SIGSTOP the leader and, once it
resumes, it writes nothing (it wanted to: its dropped writes are counted)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.kube.emulator import KubeEmulator
from tests.e2e.harness import echo_backend, free_port
from tests.waiting import eventually

from .bed import endpoint_slice, lb_service, pod
from .test_traffic import load

pytestmark = pytest.mark.e2e
LEASE_S = 6  # lease duration of these tests; renew deadline 4 s, retry period 0.3 s
GROUP = "coordination.k8s.io"


@dataclass
class Replica:
    name: str
    xds: str
    metrics_port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def agent(self) -> str:
        return f"podway-controller ({self.name})"


@dataclass
class Fleet:
    emu: KubeEmulator
    root: Path
    kubeconfig: Path
    replicas: dict[str, Replica] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self, name: str) -> Replica:
        xds = f"127.0.0.1:{free_port()}"
        metrics = free_port()
        log = self.root / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "podway", "controller", "--kubeconfig",
                 str(self.kubeconfig), "--xds-listen", xds, "--xds-unauthenticated",
                 "--backend-mode", "clusterip", "--address", "127.0.0.1",
                 "--metrics-port", str(metrics), "--metrics-address", "127.0.0.1",
                 "--identity", name, "--lease-namespace", "default",
                 "--lease-duration-s", str(LEASE_S), "--renew-deadline-s", "4",
                 "--retry-period-s", "0.3"],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        replica = Replica(name, xds, metrics, proc, log)
        self.replicas[name] = replica
        return replica

    def lease(self) -> dict[str, Any]:
        found = self.emu.get("leases", "default", "podway-controller", group=GROUP)
        return dict((found or {}).get("spec") or {})

    def writes(self, replica: Replica, since: int = 0) -> list[Any]:
        """Writes of ``replica`` after the first ``since`` writes, Lease writes left out."""
        return [w for w in self.emu.writes[since:]
                if w.agent == replica.agent and w.plural != "leases"]


async def fetch(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = (await reader.read()).decode()
    finally:
        writer.close()
    return int(data.split()[1]), data.split("\r\n\r\n", 1)[-1]


def sample(text: str, series: str) -> float | None:
    """One sample of the Prometheus text (``series`` with its labels, as exposed)."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


async def ready(replica: Replica, limit_s: float = 60) -> None:
    async with asyncio.timeout(limit_s):
        while True:
            assert replica.proc.poll() is None, replica.log.read_text()[-3000:]
            with contextlib.suppress(OSError):
                if (await fetch(replica.metrics_port, "/readyz"))[0] == 200:
                    return
            await asyncio.sleep(0.05)


async def metric(replica: Replica, series: str) -> float | None:
    return sample((await fetch(replica.metrics_port, "/metrics"))[1], series)


async def until_metric(replica: Replica, series: str, check: Any, limit_s: float = 30) -> None:
    async with asyncio.timeout(limit_s):
        while True:
            if check(await metric(replica, series)):
                return
            await asyncio.sleep(0.05)


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    async with KubeEmulator() as emu:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "emu", "cluster": {"server": emu.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "u"}}],
            "current-context": "emu"}))
        made = Fleet(emu, tmp_path, kubeconfig)
        try:
            yield made
        finally:
            for replica in made.replicas.values():
                if replica.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        replica.proc.send_signal(signal.SIGCONT)
                        replica.proc.kill()
                replica.proc.wait(timeout=30)
            for task in made.tasks:
                task.cancel()
            await asyncio.gather(*made.tasks, return_exceptions=True)


def seed(fleet: Fleet, name: str, lb_port: int, backend_port: int) -> None:
    fleet.emu.put("services", lb_service(name, lb_port, backend_port))
    fleet.emu.put("endpointslices", endpoint_slice(name, {f"{name}-a": "127.0.0.1"},
                                                   backend_port), group="discovery.k8s.io")
    fleet.emu.put("pods", pod(f"{name}-a", "127.0.0.1", app=name))


def lb_ip(fleet: Fleet, name: str) -> Any:
    obj = fleet.emu.get("services", "default", name) or {}
    return ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")


async def test_sigkill_the_leader_under_load_fails_no_request(fleet: Fleet) -> None:
    """The engine is connected to the leader; SIGKILL it under load: zero failed requests;
    the engine gets later changes from the other replica; that replica takes the Lease (one
    more transition) no sooner than the lease duration after the dead leader's last renewal,
    and writes the status of a Service created while nobody led."""
    first_port, first_task = await echo_backend("pod")
    second_port, second_task = await echo_backend("pod2")
    fleet.tasks += [first_task, second_task]
    lb_port = free_port()
    seed(fleet, "web", lb_port, first_port)
    a = fleet.start("ctl-a")
    await ready(a)
    await eventually(lambda: fleet.lease().get("holderIdentity") == "ctl-a", within=30)
    await eventually(lambda: bool(lb_ip(fleet, "web")), within=30)
    b = fleet.start("ctl-b")
    engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
        BootstrapOptions(node_id="edge-1", xds=(a.xds, b.xds)))))
    fleet.tasks.append(asyncio.create_task(engine.run(), name="engine"))
    await engine.wait_ready(limit_s=60)
    await ready(b)
    await until_metric(a, "podway_xds_streams", lambda v: v == 1)  # the engine is on a
    assert await metric(b, "podway_xds_streams") == 0
    async with load(lb_port) as running:
        await running.answered_by("pod", limit_s=30)
        last_of_a = fleet.lease()
        killed = time.monotonic()
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=30)
        fleet.emu.put("services", lb_service("late", free_port(), first_port))
        await running.more(30)  # served while no replica leads

        def took_over() -> bool:
            nonlocal last_of_a
            spec = fleet.lease()
            if spec.get("holderIdentity") == "ctl-a":
                last_of_a = spec
            return spec.get("holderIdentity") == "ctl-b"

        await eventually(took_over, within=LEASE_S * 5)
        took = time.monotonic() - killed
        fleet.emu.put("endpointslices", endpoint_slice("web", {"web-a": "127.0.0.1"},
                                                       second_port), group="discovery.k8s.io")
        await running.answered_by("pod2", limit_s=30)  # the engine follows replica b now
        await eventually(lambda: bool(lb_ip(fleet, "late")), within=30)
        await running.more(30)
    assert running.failures == []
    spec = fleet.lease()
    assert spec["leaseTransitions"] == last_of_a["leaseTransitions"] + 1
    assert stamp(spec["acquireTime"]) >= stamp(last_of_a["renewTime"]) + LEASE_S - 0.1
    assert [(w.name, w.subresource) for w in fleet.writes(b) if w.plural == "services"] == [
        ("late", "status")]
    assert await metric(b, "podway_xds_streams") == 1
    print(f"\nleader SIGKILLed: the other replica took the Lease after {took:.2f} s "
          f"(lease {LEASE_S} s); {len(running.answers)} requests, 0 failed")


async def test_a_paused_leader_loses_the_lease_and_never_writes_after_it_resumes(
        fleet: Fleet) -> None:
    """SIGSTOP the leader: the other replica takes over and writes a new Service's status.
    SIGCONT: the old leader sees the change, wants to write (its Synced event is dropped by the
    fence and counted), reports leader 0 and one lost transition, and sends no write."""
    seed(fleet, "web", free_port(), free_port())
    a = fleet.start("ctl-a")
    await ready(a)
    await eventually(lambda: fleet.lease().get("holderIdentity") == "ctl-a", within=30)
    b = fleet.start("ctl-b")
    await ready(b)
    await eventually(lambda: bool(lb_ip(fleet, "web")), within=30)
    assert await metric(a, "podway_controller_leader") == 1
    assert await metric(b, "podway_controller_leader") == 0
    fenced = "podway_controller_fenced_writes_total{writer=\"event\"}"
    lost = 'podway_controller_leader_transitions_total{change="lost"}'
    before, lost_before = await metric(a, fenced) or 0.0, await metric(a, lost) or 0.0
    a.proc.send_signal(signal.SIGSTOP)
    try:
        await eventually(lambda: fleet.lease().get("holderIdentity") == "ctl-b", within=LEASE_S * 5)
        fleet.emu.put("services", lb_service("late", free_port()))
        await eventually(lambda: bool(lb_ip(fleet, "late")), within=30)
        resumed = len(fleet.emu.writes)
    finally:
        a.proc.send_signal(signal.SIGCONT)
    await until_metric(a, 'podway_controller_objects{kind="Service"}', lambda v: v == 2)
    async with asyncio.timeout(30):  # it took the change in: it dropped or sent its event
        while True:
            if (await metric(a, fenced) or 0) > before or fleet.writes(a, since=resumed):
                break
            await asyncio.sleep(0.05)
    assert fleet.writes(a, since=resumed) == []
    await until_metric(a, "podway_controller_leader", lambda v: v == 0)
    assert await metric(a, lost) == lost_before + 1
    assert fleet.writes(a, since=resumed) == []
    assert await metric(b, "podway_controller_leader") == 1
    assert "late" in {w.name for w in fleet.writes(b)}
