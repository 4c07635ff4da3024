"""Engines apart from the controller: several at once over a unix socket, and the CLI's stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.health_report import Reporter, ReportOptions
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.translate import TranslateOptions

from .harness import (
    SHOP_INGRESS,
    backend_manifests,
    echo_backend,
    endpoints,
    eventually,
    free_port,
    get,
    service,
)

pytestmark = pytest.mark.e2e

INGRESS = SHOP_INGRESS


async def test_two_engines_share_one_controller_over_a_unix_socket(tmp_path: Path) -> None:
    """Two `podway engine`-style Envoys (each with its reporter) on one unix-socket xDS server
    both get the config; on one host only the first may listen on its port (one owner per
    address:port): the second refuses the listener, and the controller records that engine's
    rejection of it. Both ways Envoy refuses count: a NACK (the bind fails at once) and a
    listener it accepted and then could not listen on (no NACK: its log says so, its reporter
    tells the controller; issue 23.2)."""
    root = tmp_path / "m"
    root.mkdir()
    (root / "web.yaml").write_text(backend_manifests("web", 1) + "---\n" + INGRESS)
    http_port = free_port()
    controller = Standalone(StandaloneOptions(
        manifests=root, engine=False, xds_address=f"unix:{tmp_path / 'xds.sock'}",
        translate=TranslateOptions(address="127.0.0.1", http_port=http_port,
                                   https_port=free_port())))
    tasks = [asyncio.create_task(controller.run())]
    try:
        await asyncio.wait_for(controller.pipeline.wait_for(lambda s: s.generation >= 1), 10)
        engines = [Engine(EngineOptions(
            envoy_path=find_envoy(), drain_s=0,
            bootstrap=bootstrap(BootstrapOptions(node_id=f"engine-{i}",
                                                 xds=controller.server.target))))
            for i in range(2)]
        tasks += [asyncio.create_task(e.run()) for e in engines]
        tasks += [asyncio.create_task(Reporter(
            ReportOptions(node_id=f"engine-{i}", xds=controller.server.target, interval_s=0.1),
            lambda e=e: e.admin_address, refused=e.listener_failures.items).run())
            for i, e in enumerate(engines)]
        active = []
        for engine in engines:
            await engine.wait_ready(limit_s=20)
            stats = await admin.stats(await engine.wait_started(), "listener_manager")
            active.append(stats["listener_manager.total_listeners_active"])
        assert sorted(min(a, 1) for a in active) == [0, 1], active
        loser = f"engine-{active.index(0)}"
        listener = next(iter(controller.pipeline.state.ir.listeners)).name  # type: ignore[union-attr]
        state = await asyncio.wait_for(controller.pipeline.wait_for(lambda s: any(
            r.node == loser and r.resource == listener for r in s.rejections)), 10)
        refused = [r for r in state.rejections if r.node == loser]
        assert [r.type_name for r in refused] == ["Listener"], refused
        assert "in use" in refused[0].message or "errno=98" in refused[0].message, refused
        assert not [r for r in state.rejections if r.node != loser]  # the owner serves
        status, _ = await get(http_port, "shop.test", "/")
        assert status == 503  # served by the owner (the member port 1 refuses)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_podway_run_serves_and_stops_cleanly_on_sigterm(tmp_path: Path,
                                                              short_dir: Path) -> None:
    """`podway run` serves the folder; SIGTERM stops it and its Envoy within the drain period,
    and removes its state folder."""
    root = tmp_path / "m"
    root.mkdir()
    backend, echo = await echo_backend("web")
    (root / "web.yaml").write_text(backend_manifests("web", backend) + "---\n" + INGRESS)
    http_port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "run", "--manifests", str(root), "--address",
        "127.0.0.1", "--http-port", str(http_port), "--https-port", str(free_port()),
        "--drain-s", "0.5", "--log-level", "warning", "--state-dir", str(short_dir / "s"),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        async def serving() -> bool:
            status, body = await get(http_port, "shop.test", "/")
            return status == 200 and body.get("name") == "web"

        await eventually(serving, within=30)
        children = _children(process.pid)
        assert children  # Envoy runs under podway
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 15)
        assert code == 0
        assert all(not _alive(pid) for pid in children)
        assert not (short_dir / "s").exists()  # nothing left behind
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        echo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await echo


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.mark.parametrize("via", ["unix", "hostname"])
async def test_podway_engine_cli_serves_a_no_engine_controller(tmp_path: Path, short_dir: Path,
                                                               via: str) -> None:
    """`podway run --no-engine` plus `podway engine --xds ...` serve, with the xDS address a unix
    socket or a host name (`localhost:PORT`, which Envoy must resolve itself)."""
    root = tmp_path / "m"
    root.mkdir()
    (root / "lb.yaml").write_text(service("lb", free_port(), 1, lb=True) + "---\n"
                                  + endpoints("lb", {"TCP": 1}))
    backend, echo = await echo_backend("web")
    (root / "web.yaml").write_text(backend_manifests("web", backend) + "---\n" + INGRESS)
    http_port = free_port()
    opt_in: tuple[str, ...] = ()
    if via == "unix":
        listen = target = f"unix:{tmp_path / 'xds.sock'}"
    else:
        xds_port = free_port()
        listen, target = f"127.0.0.1:{xds_port}", f"localhost:{xds_port}"
        opt_in = ("--xds-unauthenticated",)
    common = ("--log-level", "warning")
    controller = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "run", "--manifests", str(root), "--no-engine",
        "--xds-address", listen, *opt_in, "--address", "127.0.0.1", "--http-port",
        str(http_port), "--https-port", str(free_port()), *common,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    engine = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "engine", "--xds", target,
        "--node-id", "edge-1", "--drain-s", "0", "--state-dir", str(short_dir / "e"), *common,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async def serving() -> bool:
            status, body = await get(http_port, "shop.test", "/")
            return status == 200 and body.get("name") == "web"

        await eventually(serving, within=30)
        for process in (engine, controller):
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        for process in (engine, controller):
            if process.returncode is None:
                process.kill()
                await process.wait()
        echo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await echo


async def test_engine_keeps_serving_while_the_controller_restarts(tmp_path: Path) -> None:
    """With the controller gone the engine serves its last config; a new controller's config
    arrives once it is back (the engine reconnects by itself)."""
    root = tmp_path / "m"
    root.mkdir()
    tasks: list[asyncio.Task[None]] = []
    ports = {}
    for name in ("blue", "green"):
        ports[name], task = await echo_backend(name)
        tasks.append(task)
        (root / f"{name}.yaml").write_text(backend_manifests(name, ports[name]))
    (root / "ingress.yaml").write_text(INGRESS.replace("name: web, port", "name: blue, port"))
    http_port = free_port()

    def controller() -> Standalone:
        return Standalone(StandaloneOptions(
            manifests=root, engine=False, xds_address=f"unix:{tmp_path / 'xds.sock'}",
            translate=TranslateOptions(address="127.0.0.1", http_port=http_port,
                                       https_port=free_port())))

    first = controller()
    first_task = asyncio.create_task(first.run())
    tasks.append(first_task)
    try:
        await asyncio.wait_for(first.pipeline.wait_for(lambda s: s.generation >= 1), 10)
        engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
            BootstrapOptions(node_id="edge", xds=first.server.target))))
        tasks.append(asyncio.create_task(engine.run()))
        await engine.wait_ready(limit_s=20)

        async def answered_by(name: str) -> bool:
            status, body = await get(http_port, "shop.test", "/")
            return status == 200 and body.get("name") == name

        await eventually(lambda: answered_by("blue"), within=10)
        first_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first_task
        assert await answered_by("blue")  # controller gone: last good config still serves
        (root / "ingress.yaml").write_text(INGRESS.replace("name: web, port", "name: green, port"))
        second = controller()
        tasks.append(asyncio.create_task(second.run()))
        await eventually(lambda: answered_by("green"), within=20)
        assert engine.starts == 1  # no Envoy restart was needed
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.mark.parametrize("xds", ["localhost:18000", "127.0.0.1:18000", "[::1]:18000",
                                 "unix:/tmp/podway-x.sock"])
async def test_envoy_accepts_the_bootstrap_for_every_xds_address_form(
        tmp_path: Path, xds: str) -> None:
    """The wheel's Envoy validates the bootstrap for a host name, IPv4, IPv6 and a unix socket."""
    config = tmp_path / "bootstrap.json"
    config.write_text(json.dumps(bootstrap(BootstrapOptions(node_id="v", xds=xds))))
    process = await asyncio.create_subprocess_exec(
        str(find_envoy()), "--mode", "validate", "-c", str(config), "--disable-hot-restart",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        output, _ = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, output.decode(errors="replace")[-2000:]


async def test_stop_drains_so_an_in_flight_request_completes(tmp_path: Path) -> None:
    """With drain_s > 0, stopping the engine lets a slow request already in flight finish."""
    from .harness import make_stack

    root = tmp_path / "m"
    root.mkdir()
    stack = await make_stack(root, drain_s=2.0)
    try:
        backend = await stack.start_echo("web")
        stack.write("web.yaml", backend_manifests("web", backend) + "---\n" + INGRESS)
        await stack.start()
        address = await (await stack.engine()).wait_started()
        slow = asyncio.create_task(get(stack.http_port, "shop.test", "/delay/700"))

        async def in_flight() -> bool:  # Envoy holds it, sent upstream, not yet answered
            active = await admin.stats(address, r"upstream_rq_active$")
            return any(v >= 1 for k, v in active.items() if "web" in k)

        await eventually(in_flight)
        assert not slow.done()
        engine_task = stack.tasks.pop()  # the standalone: stopping it stops Envoy
        engine_task.cancel()
        status, body = await asyncio.wait_for(slow, 5)
        assert (status, body.get("path")) == (200, "/delay/700")
        with contextlib.suppress(asyncio.CancelledError):
            await engine_task
    finally:
        await stack.stop()
