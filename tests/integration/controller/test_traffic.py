"""Through a real Envoy fed by the controller: a live mode switch and a controller restart
under load lose no request."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme

from podway.envoy import types
from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.xds.protocol import Ack, Event, Nack
from podway.envoy.xds.server import ServerTLS
from podway.translate import BackendMode
from tests.e2e.harness import echo_backend, free_port, get
from tests.waiting import eventually

from .bed import (
    GW,
    Bed,
    edit,
    endpoint_slice,
    gateway,
    gateway_class,
    lb_service,
    members,
    options,
    pod,
)

pytestmark = pytest.mark.e2e
POOL_SUFFIX = "/tcp"
# Envoy's counts of listeners and clusters it added, replaced or removed.
REPLACED = (r"^(listener_manager\.listener_(added|modified|removed|in_place_updated)"
            r"|cluster_manager\.cluster_(added|modified|removed))$")


@dataclass
class Load:
    """Requests in a loop through the engine; who answered and every failure."""

    port: int
    answers: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    progress: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        for _ in range(20000):  # bounded
            try:
                status, body = await get(self.port, "web.test")
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                self.failures.append(repr(exc))
            else:
                if status != 200:
                    self.failures.append(str(status))
                self.answers.append(str(body.get("name")))
            self.progress.set()
            await asyncio.sleep(0.002)

    async def answered_by(self, name: str, limit_s: float = 15) -> None:
        """Wait until the latest answer comes from ``name`` (event-driven: each answer)."""
        async with asyncio.timeout(limit_s):
            while not (self.answers and self.answers[-1] == name):
                self.progress.clear()
                await self.progress.wait()

    async def tries(self, count: int) -> None:
        """Wait until ``count`` more requests were sent, answered or failed."""
        target = len(self.answers) + len(self.failures) + count
        async with asyncio.timeout(15):
            while len(self.answers) + len(self.failures) < target:
                self.progress.clear()
                await self.progress.wait()

    async def more(self, count: int = 20) -> None:
        target = len(self.answers) + count
        async with asyncio.timeout(15):
            while len(self.answers) < target:
                self.progress.clear()
                await self.progress.wait()


@contextlib.asynccontextmanager
async def load(port: int) -> AsyncIterator[Load]:
    running = Load(port)
    task = asyncio.create_task(running.run(), name="load")
    try:
        await running.more(5)
        yield running
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def backends(bed: Bed) -> tuple[int, int]:
    """A "pod" echo (clusterip member) and an "npl" echo (its NodePortLocal port)."""
    pod_port, pod_task = await echo_backend("pod")
    npl_port, npl_task = await echo_backend("npl")
    bed.tasks += [pod_task, npl_task]
    return pod_port, npl_port


async def test_live_mode_switch_under_load_drops_nothing(bed: Bed) -> None:
    """clusterip → nodeportlocal (held until the pod's NPL annotation exists) → clusterip,
    by editing the Service annotation, under load through Envoy: zero failed requests."""
    pod_port, npl_port = await backends(bed)
    lb_port = free_port()
    pool = f"pool/default/web/{lb_port}{POOL_SUFFIX}"
    bed.emu.put("services", lb_service("web", lb_port, pod_port))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "127.0.0.1"}, pod_port),
                group="discovery.k8s.io")
    bed.emu.put("pods", pod("web-a", "127.0.0.1"))
    await bed.start()
    await bed.until(lambda s: members(s, pool) == [f"127.0.0.1:{pod_port}"])
    await bed.engine()
    async with load(lb_port) as running:
        await running.answered_by("pod")
        edit(bed, "services", lb_service("web", lb_port, pod_port, annotations={
            "podway.io/backend-mode": "nodeportlocal"}))
        # No NPL annotation yet: the Service stays in clusterip mode (held), traffic flows.
        await bed.until(lambda s: bool(bed.controller and bed.controller.gate
                                       and bed.controller.gate.report.held))
        await running.more()
        assert running.answers[-1] == "pod"
        bed.emu.put("pods", pod("web-a", "127.0.0.1", npl=[(pod_port, "127.0.0.1", npl_port)]))
        await bed.until(lambda s: members(s, pool) == [f"127.0.0.1:{npl_port}"])
        await running.answered_by("npl")
        edit(bed, "services", lb_service("web", lb_port, pod_port, annotations={
            "podway.io/backend-mode": "clusterip"}))
        await running.answered_by("pod")
        await running.more()
    assert running.failures == []


async def test_default_mode_switch_from_the_config_file_under_load_drops_nothing(
        bed: Bed, tmp_path: Path) -> None:
    """The --config file's backendMode changes the default live: a Service without the
    annotation moves clusterip → nodeportlocal (held until its pod's NPL entry exists) →
    clusterip (the file's key removed: the flag's default again), under load through Envoy,
    without restart: zero failed requests. An annotated Service keeps its mode throughout."""
    pod_port, npl_port = await backends(bed)
    lb_port, pinned_port = free_port(), free_port()
    pool = f"pool/default/web/{lb_port}{POOL_SUFFIX}"
    pinned_pool = f"pool/default/pinned/{pinned_port}{POOL_SUFFIX}"
    config = tmp_path / "podway.yaml"
    config.write_text("# no backendMode: the flag's default (clusterip)\n")
    bed.emu.put("services", lb_service("web", lb_port, pod_port))
    bed.emu.put("services", lb_service("pinned", pinned_port, pod_port, annotations={
        "podway.io/backend-mode": "clusterip"}))
    for name in ("web", "pinned"):
        bed.emu.put("endpointslices", endpoint_slice(name, {"web-a": "127.0.0.1"}, pod_port),
                    group="discovery.k8s.io")
    bed.emu.put("pods", pod("web-a", "127.0.0.1"))
    await bed.start(config=config, config_poll_s=0.02)
    await bed.until(lambda s: members(s, pool) == [f"127.0.0.1:{pod_port}"])
    await bed.engine()
    assert bed.controller is not None
    gate = bed.controller.gate
    assert gate is not None
    async with load(lb_port) as running:
        await running.answered_by("pod")
        config.write_text("backendMode: nodeportlocal\n")
        await bed.until(lambda s: bool(gate.report.held))  # no NPL entry yet: held
        await running.more()
        assert running.answers[-1] == "pod"
        bed.emu.put("pods", pod("web-a", "127.0.0.1", npl=[(pod_port, "127.0.0.1", npl_port)]))
        state = await bed.until(lambda s: members(s, pool) == [f"127.0.0.1:{npl_port}"])
        assert members(state, pinned_pool) == [f"127.0.0.1:{pod_port}"]
        await running.answered_by("npl")
        config.write_text("backendMode: [not, a, mode]\n")  # bad: kept as it was
        await running.more()
        config.write_text("{}\n")
        await running.answered_by("pod")
        await running.more()
    assert running.failures == []
    assert gate.default is BackendMode.CLUSTERIP


async def test_controller_restart_under_load_drops_nothing(bed: Bed) -> None:
    """The engine keeps its config while the controller is down; the restarted controller
    serves the same config and a change made meanwhile arrives."""
    pod_port, npl_port = await backends(bed)
    lb_port = free_port()
    bed.translate = options(BackendMode.NODEPORTLOCAL)
    bed.emu.put("services", lb_service("web", lb_port, pod_port))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "127.0.0.1"}, pod_port),
                group="discovery.k8s.io")
    bed.emu.put("pods", pod("web-a", "127.0.0.1", npl=[(pod_port, "127.0.0.1", npl_port)]))
    xds = f"127.0.0.1:{free_port()}"
    await bed.start(xds_address=xds)
    await bed.until(lambda s: len(s.ir.listeners) == 1)
    admin_address = await (await bed.engine()).wait_started()
    async with load(lb_port) as running:
        await running.answered_by("npl")
        before = await admin.stats(admin_address, REPLACED)
        await bed.stop_controller()
        await running.more(30)  # served while no controller runs
        bed.emu.put("pods", pod("web-a", "127.0.0.1", npl=[(pod_port, "127.0.0.1", pod_port)]))
        await bed.start(xds_address=xds)
        await running.answered_by("pod", limit_s=30)  # reconnected and updated
        await running.more()
    assert running.failures == []
    # The restarted controller's config is the same but for the load assignment: Envoy
    # replaced, added or removed no listener and no cluster (that would drain connections).
    assert await admin.stats(admin_address, REPLACED) == before


async def _hosts(admin_address: str) -> dict[int, dict[str, Any]]:
    """Envoy's view of its hosts, by port: health status and priority."""
    _, body = await admin.request(admin_address, "/clusters?format=json")
    return {host["address"]["socket_address"]["port_value"]: {
                **host.get("health_status", {}), "priority": host.get("priority", 0)}
            for cluster in json.loads(body).get("cluster_statuses", [])
            for host in cluster.get("host_statuses", [])}


async def test_a_member_swap_made_while_the_controller_was_down_drops_nothing(
        bed: Bed) -> None:
    """While the controller is down, the Service's only member moves to a port where nothing
    listens yet (a named targetPort on new pods, say). The restarted controller knows nothing
    of what the engine serves but the versions it names on reconnect; the old member, named in
    its load assignment's version, carries the traffic at priority 1 until the new one passes a
    check, which it fails first: zero failed requests. A long check timeout makes the hold
    (``handover.hold_s``) far longer than the test needs; the final assignment (no old member)
    follows the hold with no other change to wake the stream."""
    old_port, old_task = await echo_backend("old")
    bed.tasks.append(old_task)
    new_port, lb_port = free_port(), free_port()  # nothing listens on new_port yet
    checked = {"podway.io/health-check-timeout": "5s"}
    bed.emu.put("services", lb_service("web", lb_port, 8080, annotations=checked))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "127.0.0.1"}, old_port),
                group="discovery.k8s.io")
    xds = f"127.0.0.1:{free_port()}"
    await bed.start(xds_address=xds)
    await bed.until(lambda s: len(s.ir.listeners) == 1)
    admin_address = await (await bed.engine()).wait_started()
    async with load(lb_port) as running:
        await running.answered_by("old")
        before = await admin.stats(admin_address, REPLACED)
        await bed.stop_controller()
        bed.emu.put("endpointslices", endpoint_slice("web", {"web-b": "127.0.0.1"}, new_port),
                    group="discovery.k8s.io")
        await bed.start(xds_address=xds)
        await eventually(lambda: _new_member_failed(admin_address, new_port), within=30)
        await running.tries(20)  # while the new member is out
        assert running.failures == [], "requests failed while the new member was out"
        assert running.answers[-1] == "old"
        _, new_task = await echo_backend("new", port=new_port)
        bed.tasks.append(new_task)
        await running.answered_by("new", limit_s=30)  # its next check passed
        await eventually(lambda: _old_member_gone(admin_address, old_port), within=60)
        await running.more()
    assert running.failures == []
    assert await admin.stats(admin_address, REPLACED) == before


async def _new_member_failed(admin_address: str, port: int) -> bool:
    """The new member is in Envoy's pool and failed its first check."""
    host = (await _hosts(admin_address)).get(port)
    return host is not None and bool(host.get("failed_active_health_check"))


async def _old_member_gone(admin_address: str, port: int) -> bool:
    return port not in await _hosts(admin_address)


async def test_engine_refusal_lands_as_a_condition_and_an_event(bed: Bed) -> None:
    """A Gateway listener Envoy cannot bind (NACK) becomes Programmed=False on the Gateway's
    status and an EngineRejected Warning event; the rest keeps serving."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", free_port()))
    holder.listen()
    taken = holder.getsockname()[1]
    try:
        bed.emu.install_gateway_api()
        bed.emu.put("gatewayclasses", gateway_class(), group=GW)
        bed.emu.put("gateways", gateway(port=taken), group=GW)
        await bed.start()
        await bed.until(lambda s: len(s.ir.listeners) == 1)
        await bed.engine()
        await bed.until(lambda s: bool(s.rejections))

        def programmed() -> str | None:
            obj = bed.emu.get("gateways", "default", "edge", group=GW) or {}
            conditions = (obj.get("status") or {}).get("conditions") or []
            return next((c["status"] for c in conditions if c["type"] == "Programmed"), None)

        await eventually(lambda: programmed() == "False")
        await eventually(lambda: any(e.get("reason") == "EngineRejected"
                                and e["involvedObject"]["name"] == "edge"
                                for e in bed.emu.events))
    finally:
        holder.close()


async def test_many_engines_over_mutual_tls(bed: Bed) -> None:
    """Two engines with client certificates get the whole config from one controller over
    mutual TLS and serve it: the first ACKs the listener; the second, on the same host, gets it
    too and refuses it — one owner per address and port (no SO_REUSEPORT), never two engines
    splitting one port."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    tls = ServerTLS(cert_pem=server.cert_chain_pems[0].bytes(),
                    key_pem=server.private_key_pem.bytes(), client_ca_pem=ca.cert_pem.bytes())
    pod_port, _ = await backends(bed)
    lb_port = free_port()
    bed.emu.put("services", lb_service("web", lb_port, pod_port))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "127.0.0.1"}, pod_port),
                group="discovery.k8s.io")
    acked: dict[str, asyncio.Event] = {}
    refused: dict[str, str] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, Ack) and event.type_url == types.LISTENER:
            acked.setdefault(event.node, asyncio.Event()).set()
        if isinstance(event, Nack) and event.type_url == types.LISTENER:
            refused[event.node] = event.message
            acked.setdefault(event.node, asyncio.Event()).set()  # it got the listener

    await bed.start(xds_tls=tls, xds_unauthenticated=False)
    assert bed.controller is not None
    assert bed.controller.server is not None
    bed.controller.event_hooks.append(on_event)
    await bed.until(lambda s: len(s.ir.listeners) == 1)
    for node_id in ("edge-1", "edge-2"):
        client_cert = ca.issue_cert(node_id)  # the node id it may claim
        engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
            BootstrapOptions(
                node_id=node_id, xds=bed.controller.server.target,
                xds_ca_pem=ca.cert_pem.bytes().decode(),
                xds_client_cert_pem=client_cert.cert_chain_pems[0].bytes().decode(),
                xds_client_key_pem=client_cert.private_key_pem.bytes().decode()))))
        bed.tasks.append(asyncio.create_task(engine.run(), name=f"engine-{node_id}"))
        await engine.wait_ready(limit_s=30)
    async with asyncio.timeout(20):
        for node_id in ("edge-1", "edge-2"):
            await acked.setdefault(node_id, asyncio.Event()).wait()
    assert bed.controller.server.servicer.streams == 2
    assert len(refused) == 1, refused  # whichever bound second (edge-2: it starts second)
    assert "already in use" in next(iter(refused.values()))
    status, body = await get(lb_port, "web.test")
    assert (status, body.get("name")) == (200, "pod")
