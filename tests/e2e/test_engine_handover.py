"""An Envoy engine handing its ports to a successor: the engine Deployment's rolling update with
surge, on one host. The xDS server gives every listener SO_REUSEPORT (the controller's
``--listener-reuse-port``), so a second engine binds the ports the first holds; the first is then
stopped with its drain. Two steady streams of connections, one through an L4 listener and one
through an HTTP listener (each a request its member answers after 40 ms, so a connection is in
flight for that long), must lose none, and a slow request the old engine holds when it is
stopped must finish.

Found by the lab's helm upgrade (CI, 1 of 15,557 L4 requests: a connection closed with no
answer): the stopping Envoy kept accepting through its graceful drain and was stopped at its
end, so the connections it took in its last instants were cut (here 1 to 3 a stop). A stop now
stops accepting first (the successor takes every new connection), then lets those in flight
finish, then ends. One that sat in the stopping Envoy's accept queue when it closed its socket
is reset unless ``net.ipv4.tcp_migrate_req`` moves it to the successor (docs/install.md,
"Upgrade" asks it of engine nodes; the lab sets it). So the test runs in a child process in
a network namespace of its own with that setting (``unshare --net``), whatever the host's: with
the host's default (0) it failed about one stop in a few hundred. A child, not the
``migrating_loopback`` fixture (this thread in the namespace): the xDS server's gRPC threads
started in there would stay in it after the test, and a later test's gRPC connections with
them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from podway.base.tasks import cancel_and_wait
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.translate import TranslateOptions

from .harness import (
    Load,
    echo_backend,
    endpoints,
    eventually,
    free_port,
    get,
    service,
    shop_ingress,
)

pytestmark = pytest.mark.e2e

HELD_MS = 40  # how long the member holds each answer


async def _answers(port: int, host: str) -> bool:
    try:
        return (await get(port, host, "/"))[0] == 200
    except EOFError:  # no healthy member yet: closed unanswered
        return False


def _engine(server_target: str, node: str) -> Engine:
    return Engine(EngineOptions(envoy_path=find_envoy(), drain_s=2.0, bootstrap=bootstrap(
        BootstrapOptions(node_id=node, xds=server_target, delta=True))))


async def test_a_successor_takes_the_port_and_the_stopped_engine_cuts_no_connection(
        tmp_path: Path) -> None:
    """The hand-over below, in a network namespace of its own (see the module docstring)."""
    child = await asyncio.create_subprocess_exec(
        "unshare", "--net", "--", sys.executable, "-m", __name__, str(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True, cwd=Path(__file__).resolve().parents[2])
    try:
        out, _ = await asyncio.wait_for(child.communicate(), 180)
    finally:
        if child.returncode is None:  # its Envoys die with it (ephemeral state)
            os.killpg(child.pid, signal.SIGKILL)
            await child.wait()
    assert child.returncode == 0, out.decode(errors="replace")[-6000:]


async def _hand_over(tmp_path: Path) -> None:
    backend, echo = await echo_backend("web")
    port = free_port()
    root = tmp_path / "m"
    root.mkdir()
    (root / "web.yaml").write_text(service("web", port, backend, lb=True) + "---\n"
                                   + endpoints("web", {"TCP": backend}) + "---\n"
                                   + shop_ingress(port))
    http_port = free_port()
    controller = Standalone(StandaloneOptions(
        manifests=root, engine=False, xds_address=f"unix:{tmp_path / 'xds.sock'}",
        listener_reuse_port=True, translate=TranslateOptions(
            address="127.0.0.1", http_port=http_port, https_port=free_port())))
    tasks = [echo, asyncio.create_task(controller.run())]
    streams: list[Load] = []
    try:
        await asyncio.wait_for(controller.pipeline.wait_for(lambda s: s.generation >= 1), 10)
        old = _engine(controller.server.target, "engine-old")
        old_task = asyncio.create_task(old.run())
        tasks.append(old_task)
        await old.wait_ready(limit_s=20)
        for where in ((port, "web"), (http_port, "shop.test")):  # its member checked
            await eventually(lambda w=where: _answers(*w), within=15)  # type: ignore[misc]
        streams += [Load(port, "web", path=f"/delay/{HELD_MS}"),
                    Load(http_port, "shop.test", path=f"/delay/{HELD_MS}")]
        await eventually(lambda: min(s.ok for s in streams) >= 10, within=15)
        # Held by the old engine (the only one listening yet) through its stop: its drain
        # waits for it, and the successor takes every new connection meanwhile.
        held = asyncio.create_task(get(port, "web", "/delay/1800"))
        await asyncio.sleep(0.2)
        new = _engine(controller.server.target, "engine-new")
        tasks.append(asyncio.create_task(new.run()))
        await new.wait_ready(limit_s=20)
        await asyncio.sleep(0.5)  # both engines take connections
        began = asyncio.get_running_loop().time()
        await cancel_and_wait(old_task)  # the old engine's stop: its drain, then the end
        assert (await held)[0] == 200
        assert asyncio.get_running_loop().time() - began > 0.3  # it waited for the held one
        stopped = [s.ok for s in streams]
        await eventually(lambda: all(s.ok >= n + 10 for s, n in zip(streams, stopped,
                                                                     strict=True)), within=15)
        for stream in streams:
            await stream.stop()
        assert [s.failed for s in streams] == [[], []], [(s.ok, s.failed[:5]) for s in streams]
    finally:
        for stream in streams:
            await stream.stop()
        await cancel_and_wait(*reversed(tasks))


def main() -> None:
    """The child: already in a namespace of its own (``unshare --net``), whose loopback is down
    and whose settings are the kernel's defaults until set here."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    Path("/proc/sys/net/ipv4/tcp_migrate_req").write_text("1\n")
    asyncio.run(_hand_over(Path(sys.argv[1])))


if __name__ == "__main__":
    main()
