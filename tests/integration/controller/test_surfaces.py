"""The controller's admin endpoint and dashboard (``podway.readers.surfaces``, as ``podway run`` has
them): ``podway explain --admin-socket`` against a running controller gives the verdict
``--manifests`` gives for the same objects; the dashboard page and its event stream show the
controller's pools; without ``--engine-admin`` both say members show readiness only."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from typer.testing import CliRunner

from podway.base.netaddr import HostPort
from podway.cli.app import app
from podway.cli.commands import register
from podway.engines.member_health import Health, HostState, Message
from podway.readers.admin_api import NO_ENGINE_NOTE, get_json
from tests.e2e.harness import free_port

from .bed import GW, Bed, cluster_service, endpoint_slice, gateway, gateway_class, http_route

register(app)

WEB = "pool/default/web/80"
OBJECTS: list[tuple[str, str | None, dict[str, Any]]] = [
    ("gatewayclasses", GW, gateway_class()),
    ("gateways", GW, gateway(port=8080)),
    ("httproutes", GW, http_route("shop", "shop.test")),
    ("httproutes", GW, http_route("broken", "broken.test", backend="missing")),
    ("services", None, cluster_service("web")),
    ("endpointslices", "discovery.k8s.io", endpoint_slice("web", {"web-a": "198.18.0.10"})),
]
URLS = ("http://shop.test:8080/", "http://broken.test:8080/", "http://nobody.test:8080/",
        "http://shop.test:9999/")


async def start(bed: Bed, tmp_path: Path, **overrides: Any) -> tuple[Path, int]:
    """The controller on OBJECTS with its admin socket and dashboard; once it serves web."""
    bed.emu.install_gateway_api()
    for plural, group, obj in OBJECTS:
        bed.emu.put(plural, obj, group=group)
    socket = tmp_path / "admin" / "podway.sock"
    port = free_port()
    await bed.start(admin_socket=socket, dashboard=HostPort("127.0.0.1", port), **overrides)
    await bed.until(lambda s: bool(s.ir.pools.get(WEB) and s.ir.pools[WEB].members))

    async def answering() -> None:
        while True:
            try:
                await get_json(socket, "/state")
                return
            except Exception:
                await asyncio.sleep(0.02)

    async with asyncio.timeout(15):
        await answering()
    return socket, port


def explain_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["explain", "--json", *args], env={"COLUMNS": "80"})
    assert result.exit_code in (0, 1), result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


async def test_explain_over_the_controllers_socket_agrees_with_the_manifests(
        bed: Bed, tmp_path: Path) -> None:
    socket, _ = await start(bed, tmp_path)
    assert stat.S_IMODE(socket.stat().st_mode) == 0o600
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "all.yaml").write_text(yaml.safe_dump_all([o for _, _, o in OBJECTS]))
    kinds = set()
    for url in URLS:
        # Threads: CliRunner's command runs its own event loop.
        live = await asyncio.to_thread(explain_json, url, "--admin-socket", str(socket))
        offline = await asyncio.to_thread(explain_json, url, "--manifests", str(folder),
                                          "--backend-mode", "clusterip", "--address", "127.0.0.1")
        assert live["verdict"] == offline["verdict"], url
        assert live["notes"] == [NO_ENGINE_NOTE]  # no engine known: readiness only, said so
        kinds |= {o["kind"] for o in live["verdict"]["outcomes"]}
    assert len(kinds) >= 3, kinds  # served, an invalid backend, no listener/host: not one case
    # The text report says it too.
    result = await asyncio.to_thread(CliRunner().invoke, app, [
        "explain", URLS[0], "--admin-socket", str(socket)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "readiness only" in " ".join(result.output.split())


async def test_the_controllers_dashboard_shows_its_pools(bed: Bed, tmp_path: Path) -> None:
    _, port = await start(bed, tmp_path)
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/") as page:
            assert page.status == 200
            assert "/static/dashboard.js" in await page.text()
        async with session.get(base + "/api/events") as stream:
            assert stream.status == 200
            async with asyncio.timeout(15):
                async for raw in stream.content:
                    line = raw.decode().strip()
                    if line.startswith("data: "):
                        doc = json.loads(line.removeprefix("data: "))
                        break
        assert doc["ready"]
        pools = {p["name"]: p for p in doc["pools"]}
        assert WEB in pools
        assert doc["engine"]["known"] is False  # the page says: readiness only
        async with session.get(base + "/explain", params={"url": URLS[1]}) as explained:
            text = await explained.text()
            assert explained.status == 200
            assert "readiness only" in " ".join(text.split())  # the report wraps


async def test_a_colocated_engines_admin_feeds_the_health(bed: Bed, tmp_path: Path) -> None:
    """With --engine-admin the note goes away and /health asks that engine."""
    engine_socket = tmp_path / "engine-admin.sock"
    asked = asyncio.Event()

    async def fake_admin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = json.dumps({"cluster_statuses": [{"name": WEB, "host_statuses": [{
            "address": {"socket_address": {"address": "198.18.0.10", "port_value": 8080}},
            "health_status": {"failed_outlier_check": True,
                              "eds_health_status": "HEALTHY"}}]}]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()
        asked.set()

    server = await asyncio.start_unix_server(fake_admin, path=str(engine_socket))
    try:
        socket, _ = await start(bed, tmp_path, engine_admin=f"unix:{engine_socket}")
        health = await get_json(socket, "/health")
        assert health["known"]
        assert health["pools"][WEB] == {"198.18.0.10:8080": "failed_outlier_check"}
        assert asked.is_set()
        data = await get_json(socket, "/explain", [("url", URLS[0])])
        assert "notes" not in data
    finally:
        server.close()
        await server.wait_closed()


async def test_every_engines_reported_health_feeds_explain_and_the_dashboard(
        bed: Bed, tmp_path: Path) -> None:
    """With no engine admin at all, what the engines report over the member-health stream
    (remote Envoy, HAProxy and kernel engines alike) is the live health explain and the
    dashboard show: a member one engine finds unhealthy takes nothing new, and the reason names
    that engine."""
    socket, port = await start(bed, tmp_path)
    controller = bed.controller
    assert controller is not None
    member = (WEB, "198.18.0.10:8080")
    stream = object()  # what the gRPC service does with each report it reads
    controller.health_reports.apply(stream, Message(node="hap-1", full=True, hosts={
        member: HostState(Health.UNHEALTHY, "failed active health check")}, group=""))
    controller.health_reports.apply(object(), Message(node="kern-1", full=True, hosts={
        member: HostState(Health.HEALTHY)}))
    health = await get_json(socket, "/health")
    assert health["known"]
    assert health["pools"][WEB] == {"198.18.0.10:8080": "hap-1: failed active health check"}
    data = await get_json(socket, "/explain", [("url", URLS[0])])
    assert "notes" not in data
    members = [m for p in data["pools"] for m in p["members"]]
    assert [(m["receives"], m["why"]) for m in members] == [
        (False, "failing the engine's checks (hap-1: failed active health check)")]
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/api/state") as answer:
            doc = await answer.json()
        assert doc["engine"]["known"] is True
        [seen] = [m for p in doc["pools"] if p["name"] == WEB for m in p["members"]]
        assert (seen["health"], seen["why"]) == ("unhealthy", "hap-1: failed active health check")
        async with session.get(base + "/explain", params={"url": URLS[0]}) as explained:
            text = " ".join((await explained.text()).split())
        assert "hap-1: failed active health check" in text
        assert "readiness only" not in text
    # The HAProxy engine finds it healthy again: every engine agrees.
    controller.health_reports.apply(stream, Message(node="hap-1", full=False, hosts={
        member: HostState(Health.HEALTHY)}))
    health = await get_json(socket, "/health")
    assert health["pools"][WEB] == {"198.18.0.10:8080": "healthy"}
