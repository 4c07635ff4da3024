"""``podway engine --engine haproxy|kernel`` against the controller on the API emulator: each
takes its engine group's IR over the controller's authenticated configuration stream, programs
its data plane (a real HAProxy; the kernel engine's nftables in a network namespace of its own)
and streams member health back, so a gated pod turns Ready only once both engines found it
healthy — as with Envoy. Loopback and the test's own namespace only; every engine, process and
namespace is stopped or removed in teardown, also on failure."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podway.engines import config_feed
from podway.engines.member_health import Health
from podway.engines.reporter import ReportOptions
from podway.model.base import ObjectRef
from podway.programs.remote_engine import RemoteEngine, RemoteOptions
from podway.translate import annotations as ann
from podway.translate.core.problems import Reason
from tests.e2e.harness import free_port
from tests.waiting import eventually

from .bed import (
    GW,
    Bed,
    cluster_service,
    edit,
    endpoint_slice,
    gateway,
    gateway_class,
    lb_service,
)
from .test_readiness import CHECKS, backend, gate, gated_pod, not_ready_slice, status_of

pytestmark = pytest.mark.e2e

PODWAY = str(Path(sys.executable).with_name("podway"))
HAPROXY = "/usr/sbin/haproxy"


def _no_netns() -> str | None:
    if os.geteuid() != 0:
        return "needs root for a network namespace"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))  # unix socket paths are short
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of this test (loopback up), removed afterwards."""
    why = _no_netns()
    if why:
        pytest.skip(why)
    name = f"pwre-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


class Processes:
    """Processes started by the test, killed by PID in teardown."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT)
        self.started.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture
def processes() -> Iterator[Processes]:
    made = Processes()
    try:
        yield made
    finally:
        made.close()


def haproxy_engine(bed: Bed, folder: Path, node: str = "hap-1", group: str = "") -> RemoteEngine:
    assert bed.controller is not None
    assert bed.controller.server is not None
    engine = RemoteEngine(RemoteOptions(
        kind="haproxy", folder=folder, haproxy_path=HAPROXY,
        report=ReportOptions(node_id=node, xds=bed.controller.server.target, interval_s=0.05,
                             engine_group=group)))
    bed.tasks.append(asyncio.create_task(engine.run(), name=f"engine-{node}"))
    return engine


async def ask(port: int) -> bool:
    """One request through the Service's port answered by the pod."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n")
        return b"web-1" in await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def nft_table(netns: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, "nft", "list", "table", "ip",
                           "podway_l4"], capture_output=True, text=True, check=False).stdout


def health_of(bed: Bed, node: str) -> dict[Any, Health]:
    assert bed.controller is not None
    return {k: s.health for k, s in (bed.controller.health_reports.view(node) or {}).items()}


@pytest.mark.netns
async def test_haproxy_and_kernel_engines_report_to_the_readiness_gate(
        bed: Bed, short_dir: Path, netns: str, processes: Processes) -> None:
    """A remote HAProxy engine (here) and a remote kernel engine (``podway engine --engine
    kernel`` in a namespace of its own) serve Service ``web`` from the controller's IR; the
    gated pod stays not Ready while either has not found it healthy, and turns Ready once both
    have. HAProxy serves the Service's port for real."""
    port = free_port()
    lb_port = free_port()
    bed.lb_address = None  # the listener on 127.0.0.1, where HAProxy can bind it
    bed.emu.put("services", lb_service("web", lb_port, port, annotations=CHECKS))
    bed.emu.put("pods", gated_pod("web-1", "127.0.0.1"))
    bed.emu.put("endpointslices", not_ready_slice(port))
    controller = await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}")
    assert controller.server is not None
    hap = haproxy_engine(bed, short_dir / "hap")
    processes.start("ip", "netns", "exec", netns, PODWAY, "engine", "--engine", "kernel",
                    "--xds", controller.server.target, "--node-id", "kern-1",
                    "--state-dir", str(short_dir / "kern"), "--health-report-s", "0.05",
                    log=short_dir / "kernel.log")
    member = (f"pool/default/web/{lb_port}/tcp", f"127.0.0.1:{port}")
    try:
        # Both engines are sent the IR and report the member (nothing listens yet: unhealthy).
        await eventually(lambda: health_of(bed, "hap-1").get(member) == Health.UNHEALTHY,
                         within=30)
        await eventually(lambda: health_of(bed, "kern-1").get(member) == Health.UNHEALTHY,
                         within=30)
        assert set(controller.feed.engine_groups) == {"hap-1", "kern-1"}
        assert status_of(bed) == "False"
        # The backend answers in this namespace: HAProxy finds it healthy, the kernel engine
        # (its own namespace, where nothing listens) does not: the pod waits for it.
        bed.tasks.append(await backend(port))
        await eventually(lambda: health_of(bed, "hap-1").get(member) == Health.HEALTHY,
                         within=30)
        await asyncio.sleep(1.0)
        assert health_of(bed, "kern-1").get(member) == Health.UNHEALTHY
        assert status_of(bed) == "False"
        assert "kern-1" in str((gate(bed) or {}).get("message"))
        # The same backend port in the kernel engine's namespace: both healthy, pod Ready.
        processes.start("ip", "netns", "exec", netns, PODWAY, "echo", "--tcp", "--address",
                        "127.0.0.1", "--port", str(port), "--name", "web-1",
                        "--log-level", "warning", log=short_dir / "echo.log")
        await eventually(lambda: status_of(bed) == "True", within=30)
        assert (gate(bed) or {})["reason"] == "Healthy"
        # The pod is Ready, so Kubernetes lists its endpoint ready: HAProxy serves the
        # Service's port (the member is the pod, on the host).
        bed.emu.put("endpointslices", endpoint_slice("web", {"web-1": "127.0.0.1"}, port=port))
        await eventually(lambda: ask(lb_port), within=30, ignoring=(OSError, TimeoutError))
        # The kernel engine programmed its namespace's table from the same IR.
        await eventually(lambda: f"127.0.0.1:{port}" in nft_table(netns), within=10)
        assert hap.haproxy is not None
    except BaseException:
        print((short_dir / "kernel.log").read_text()[-3000:])
        raise
    finally:
        processes.close()


async def test_a_group_configured_for_another_kind_refuses_the_engine(
        bed: Bed, short_dir: Path) -> None:
    """engineGroups in the controller's configuration: a HAProxy engine of a group configured
    for Envoy gets no configuration (FAILED_PRECONDITION, one line); nothing is applied."""
    config = short_dir / "config.yaml"
    config.write_text("engineGroups:\n  edge: envoy\n")
    controller = await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}", config=config)
    assert controller.server is not None
    opts = ReportOptions(node_id="hap-1", xds=controller.server.target, engine_group="edge")
    import grpc

    async with grpc.aio.insecure_channel(controller.server.target) as chan:
        call = chan.unary_stream(config_feed.PATH)(config_feed.encode_request(
            config_feed.Request(node=opts.node_id, group="edge", engine="haproxy")))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in call:
                pass
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "configured for envoy engines" in str(refused.value.details())
    assert dict(controller.feed.engine_groups) == {}


async def test_what_remote_haproxy_cannot_serve_reaches_the_objects_status(
        bed: Bed, short_dir: Path) -> None:
    """A remote HAProxy engine that serves a Service without a feature it asked for (here
    transparent client addresses, which HAProxy cannot give) tells the controller through its
    report: the Service gets its ``UnsupportedValue`` problem and Warning event, as under
    ``podway run --engine haproxy``; when the Service stops asking, the problem goes."""
    port, lb_port = free_port(), free_port()
    bed.lb_address = None  # the listener on 127.0.0.1, where HAProxy can bind it
    transparent = {ann.CLIENT_IP.name: "transparent"}
    bed.emu.put("services", lb_service("web", lb_port, port, annotations=transparent))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-1": "127.0.0.1"}, port=port))
    await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}")
    haproxy_engine(bed, short_dir / "hap")
    web = ObjectRef("Service", "default", "web")

    def unsupported() -> list[str]:
        state = bed.pipeline.state
        return [] if state is None else [p.message for p in state.problems if p.ref == web
                                         and p.reason is Reason.UNSUPPORTED_VALUE]

    def warned() -> list[str]:
        return [e["message"] for e in bed.emu.events if e.get("reason") == "UnsupportedValue"
                and e["involvedObject"]["name"] == "web"]

    await eventually(lambda: bool(warned()), within=30)
    assert "transparent client addresses" in warned()[0]
    assert "transparent client addresses" in unsupported()[0]
    edit(bed, "services", lb_service("web", lb_port, port))
    await eventually(lambda: not unsupported(), within=30)


async def test_config_dump_on_the_controller_shows_a_remote_haproxys_config(
        bed: Bed, short_dir: Path) -> None:
    """A remote HAProxy engine has no admin socket on the controller's host: its report sends
    the haproxy.cfg and maps it serves (when they change), and the controller's ``/config``
    (``podway config dump``) shows them by node, the newest after an edit; gone with the
    engine's stream."""
    from podway.readers.admin_api import get_json

    port, lb_port, moved = free_port(), free_port(), free_port()
    bed.lb_address = None  # the listener on 127.0.0.1, where HAProxy can bind it
    bed.emu.put("services", lb_service("web", lb_port, port))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-1": "127.0.0.1"}, port=port))
    admin = short_dir / "admin" / "admin.sock"
    admin.parent.mkdir(mode=0o700)
    await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}", admin_socket=admin)
    engine = haproxy_engine(bed, short_dir / "hap")

    async def dumped(listening: int) -> dict[str, Any] | None:
        data = await get_json(admin, "/config")
        found = data.get("haproxy", {}).get("hap-1")
        served = engine.haproxy.rendered if engine.haproxy is not None else None
        if found is None or served is None or f":{listening}\n" not in found["config"]:
            return None
        return {"found": found, "served": served}

    async def shows(listening: int) -> bool:
        return await dumped(listening) is not None

    await eventually(lambda: shows(lb_port), within=30)
    got = await dumped(lb_port)
    assert got is not None
    assert got["found"]["config"] == got["served"].config  # what HAProxy serves, exactly
    assert set(got["found"]["maps"]) == set(got["served"].maps)
    assert "PRIVATE KEY" not in str(got["found"])
    edit(bed, "services", lb_service("web", moved, port))  # a new port: a new config
    await eventually(lambda: shows(moved), within=30)
    task = next(t for t in bed.tasks if t.get_name() == "engine-hap-1")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    async def gone() -> bool:
        return "hap-1" not in (await get_json(admin, "/config")).get("haproxy", {})

    await eventually(gone, within=30)


def held_port() -> tuple[socket.socket, int]:
    """A loopback port this test listens on (no SO_REUSEPORT: HAProxy cannot share it)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, holder.getsockname()[1]


def conditions(of: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in of.get("conditions") or ()}


async def test_a_listener_set_port_remote_haproxy_cannot_bind_is_not_programmed_until_moved(
        bed: Bed, short_dir: Path) -> None:
    """A remote HAProxy engine serving a Gateway is given a ListenerSet listener on a port the
    test holds: HAProxy refuses the reload, the engine reports the listener as refused (state),
    and the set's listener and the set get ``Programmed=False/PortUnavailable`` (still
    Accepted) while the Gateway's own listener stays Programmed. Moved to a free port, the
    engine serves it, its report no longer names it, and the set is Programmed again."""
    holder, taken = held_port()
    own, free = free_port(), free_port()
    bed.translate = bed.translate.__class__(address="127.0.0.1")
    bed.emu.install_gateway_api()
    bed.emu.put("gatewayclasses", gateway_class(), group=GW)
    edge = gateway(port=own)
    edge["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
    bed.emu.put("gateways", edge, group=GW)
    bed.emu.put("services", cluster_service("web"))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "127.0.0.1"}, port=free_port()))

    def team(port: int) -> dict[str, Any]:
        return {"apiVersion": f"{GW}/v1", "kind": "ListenerSet",
                "metadata": {"name": "team", "namespace": "default"},
                "spec": {"parentRef": {"name": "edge"}, "listeners": [
                    {"name": "extra", "protocol": "HTTP", "port": port,
                     "hostname": "team.test"}]}}

    def status_of(plural: str, name: str) -> dict[str, Any]:
        return dict((bed.emu.get(plural, "default", name, group=GW) or {}).get("status") or {})

    def set_listener() -> dict[str, tuple[str, str]]:
        return conditions((status_of("listenersets", "team").get("listeners") or [{}])[0])

    try:
        await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}")
        engine = haproxy_engine(bed, short_dir / "hap")
        await asyncio.wait_for(engine.applied.wait(), 30)  # HAProxy serves the Gateway
        bed.emu.put("listenersets", team(taken), group=GW)
        await eventually(lambda: set_listener().get("Programmed", ("",))[0] == "False",
                         within=30)
        assert set_listener()["Programmed"] == ("False", "PortUnavailable")
        assert set_listener()["Accepted"] == ("True", "Accepted")
        found = status_of("listenersets", "team")
        assert conditions(found)["Programmed"] == ("False", "PortUnavailable")
        message = next(c["message"] for c in found["listeners"][0]["conditions"]
                       if c["type"] == "Programmed")
        assert "cannot bind" in message
        edge_status = status_of("gateways", "edge")
        assert conditions(edge_status)["Programmed"] == ("True", "Programmed")
        assert conditions((edge_status.get("listeners") or [{}])[0])["Programmed"] == (
            "True", "Programmed")
        assert [r.node for r in bed.pipeline.state.rejections] == ["hap-1"]  # type: ignore[union-attr]
        edit(bed, "listenersets", team(free), group=GW)
        await eventually(lambda: set_listener().get("Programmed") == ("True", "Programmed"),
                         within=30)
        assert conditions(status_of("listenersets", "team"))["Programmed"] == (
            "True", "Programmed")
        assert bed.pipeline.state is not None
        assert bed.pipeline.state.rejections == ()
    finally:
        holder.close()


async def test_a_service_port_remote_haproxy_cannot_bind_is_refused_until_freed_and_moved(
        bed: Bed, short_dir: Path) -> None:
    """A LoadBalancer Service on a port the test holds, served by a remote HAProxy engine: the
    Service gets ``podway.io/Programmed=False`` (EngineRefused) and an EngineRejected Warning,
    as Envoy's refusal gives; the test frees the port and the Service moves, HAProxy serves
    it, and the condition clears."""
    holder, taken = held_port()
    bed.lb_address = None  # the listeners on 127.0.0.1, where HAProxy can bind them
    web_port, port = free_port(), free_port()
    bed.emu.put("services", lb_service("web", web_port, port))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-1": "127.0.0.1"}, port=port))

    def programmed() -> dict[str, Any]:
        obj = bed.emu.get("services", "default", "lb") or {}
        return next((c for c in (obj.get("status") or {}).get("conditions") or []
                     if c["type"] == "podway.io/Programmed"), {})

    try:
        await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}")
        engine = haproxy_engine(bed, short_dir / "hap")
        await asyncio.wait_for(engine.applied.wait(), 30)  # HAProxy serves "web"
        bed.emu.put("services", lb_service("lb", taken, port))
        await eventually(lambda: programmed().get("status") == "False", within=30)
        assert programmed()["reason"] == "EngineRefused"
        assert "cannot bind" in programmed()["message"]
        await eventually(lambda: any(
            e.get("reason") == "EngineRejected" and e["involvedObject"]["name"] == "lb"
            for e in bed.emu.events), within=30)
        holder.close()
        edit(bed, "services", lb_service("lb", free_port(), port))
        await eventually(lambda: programmed().get("status") == "True", within=30)
        assert bed.pipeline.state is not None
        assert bed.pipeline.state.rejections == ()
    finally:
        holder.close()



async def test_a_remote_haproxy_whose_first_start_cannot_bind_lives_and_starts_once_freed(
        bed: Bed, short_dir: Path) -> None:
    """The only Service's port is held by the test when the remote HAProxy engine first
    starts: the engine does not die (HAProxy's supervisor used to raise out of its restart
    and end the whole engine), it names the listener HAProxy could not bind, keeps trying,
    and once the test frees the port (no edit) HAProxy comes up and nothing is refused.
    (No report reaches the controller meanwhile: HAProxy never ran, so the engine has no
    member view to send; docs/engines.md.)"""
    holder, taken = held_port()
    bed.lb_address = None
    port = free_port()
    bed.emu.put("services", lb_service("lb", taken, port))
    bed.emu.put("endpointslices", endpoint_slice("lb", {"web-1": "127.0.0.1"}, port=port))
    try:
        await bed.start(xds_address=f"unix:{short_dir / 'xds.sock'}")
        engine = haproxy_engine(bed, short_dir / "hap")
        await eventually(lambda: bool(engine.refusing()), within=30)
        (refused,) = engine.refusing()
        assert "cannot bind" in refused.reason
        await asyncio.sleep(1)  # a restart or two fail meanwhile
        assert not any(t.done() for t in bed.tasks)
        holder.close()
        await eventually(lambda: engine.haproxy is not None
                         and engine.haproxy.counters.started >= 1, within=40)
        assert engine.refusing() == ()
        assert not any(t.done() for t in bed.tasks)  # the engine lived through it
    finally:
        holder.close()
