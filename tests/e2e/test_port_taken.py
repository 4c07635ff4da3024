"""A port another program holds is never shown as served: `podway demo` says the port is taken
(exit status 2) instead of printing the foreign server's answers, and `podway run` never logs
"serving" for a listener Envoy could not bind."""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest
from rich.console import Console

from podway.base.errors import EnvironmentProblem
from podway.programs.demo import DemoOptions, run_demo
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.translate import TranslateOptions

from .harness import free_port

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).parents[2]
FOREIGN = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n<html>foreign</html>"


async def foreign_server(port: int) -> asyncio.Server:
    """Another program's web server on 127.0.0.1:``port`` (no SO_REUSEPORT, as most)."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(FOREIGN)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", port, reuse_port=False)


def quickstart_on_free_ports(tmp_path: Path) -> tuple[Path, list[int]]:
    """examples/quickstart with every backend port moved to a free one; two more free ports
    for the listeners."""
    chosen: set[int] = set()
    while len(chosen) < 6:
        chosen.add(free_port())
    picked = sorted(chosen)
    ports = dict(zip((18101, 18102, 18103, 18000), picked[:4], strict=True))
    manifests = tmp_path / "quickstart"
    shutil.copytree(ROOT / "examples/quickstart", manifests)
    for path in manifests.glob("*.yaml"):
        text = path.read_text()
        for old, new in ports.items():
            text = re.sub(rf"\b{old}\b", str(new), text)
        path.write_text(text)
    return manifests, picked[4:]


async def test_the_demo_says_its_port_is_taken_instead_of_showing_the_foreign_answer(
        tmp_path: Path) -> None:
    """With the HTTP port held by another server, the demo fails with one line naming the
    port; no table with the foreign server's HTML is printed."""
    manifests, (http_port, https_port) = quickstart_on_free_ports(tmp_path)
    server = await foreign_server(http_port)
    console = Console(record=True, width=160)
    try:
        with pytest.raises(ExceptionGroup) as caught:
            await run_demo(DemoOptions(manifests=manifests, http_port=http_port,
                                       https_port=https_port, once=True), console)
    finally:
        server.close()
        await server.wait_closed()
    problems = caught.value.subgroup(EnvironmentProblem)
    assert problems is not None, caught.value
    message = str(problems.exceptions[0])
    assert f"127.0.0.1:{http_port}" in message
    assert "already in use" in message
    assert "foreign" not in console.export_text()


async def test_run_never_logs_serving_for_a_listener_it_could_not_bind(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The HTTP listener's port is taken: a warning says it is not served and why; the HTTPS
    listener, bound, is said to serve."""
    manifests, (http_port, https_port) = quickstart_on_free_ports(tmp_path)
    server = await foreign_server(http_port)
    standalone = Standalone(StandaloneOptions(
        manifests=manifests, drain_s=0.2,
        translate=TranslateOptions(address="127.0.0.1", http_port=http_port,
                                   https_port=https_port)))
    task = asyncio.create_task(standalone.run())
    try:
        with caplog.at_level(logging.INFO, logger="podway.programs.standalone"):
            async with asyncio.timeout(30):
                while True:
                    if any(f"serving HTTPS on 127.0.0.1:{https_port}" in r.message
                           for r in caplog.records) and any(
                               "not serving" in r.message for r in caplog.records):
                        break
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
        lines = [r.message for r in caplog.records]
        assert not any(line.startswith(f"serving HTTP on 127.0.0.1:{http_port}")
                       for line in lines), lines
        refused = [line for line in lines if line.startswith("not serving")]
        assert len(refused) == 1, lines
        assert f"127.0.0.1:{http_port}" in refused[0]
        assert "already in use" in refused[0].lower()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        server.close()
        await server.wait_closed()


async def test_a_second_run_on_the_same_ports_is_refused_with_one_line(
        tmp_path: Path) -> None:
    """Two `podway run` on one address and port: the second exits with status 2 and one line
    naming the port (before: both Envoys listened with SO_REUSEPORT and requests were split
    between two configurations); the first keeps serving alone."""
    manifests, (http_port, https_port) = quickstart_on_free_ports(tmp_path)
    args = [sys.executable, "-m", "podway", "run", "--manifests", str(manifests),
            "--address", "127.0.0.1", "--http-port", str(http_port),
            "--https-port", str(https_port)]
    first = await asyncio.create_subprocess_exec(
        *args, "--instance", "first", stderr=asyncio.subprocess.PIPE)
    second: asyncio.subprocess.Process | None = None
    try:
        assert first.stderr is not None
        async with asyncio.timeout(60):
            while f"serving HTTP on 127.0.0.1:{http_port}" not in (
                    await first.stderr.readline()).decode():
                pass
        second = await asyncio.create_subprocess_exec(
            *args, "--instance", "second", stderr=asyncio.subprocess.PIPE)
        async with asyncio.timeout(60):
            _, err = await second.communicate()
        errors = [line for line in err.decode().splitlines() if line.startswith("error:")]
        assert second.returncode == 2, err.decode()
        assert len(errors) == 1, err.decode()
        assert "already in use" in errors[0]
        assert f"127.0.0.1:{http_port}" in errors[0] or f"127.0.0.1:{https_port}" in errors[0]
        assert "Traceback" not in err.decode()
        assert first.returncode is None  # the first one serves on
    finally:
        for proc in (p for p in (second, first) if p is not None and p.returncode is None):
            proc.send_signal(signal.SIGTERM)  # also a second one that wrongly kept running
            async with asyncio.timeout(30):
                await proc.wait()


async def test_podway_demo_exits_2_with_one_line_when_its_port_is_taken(
        tmp_path: Path) -> None:
    """The command itself: `podway demo --once` with its HTTP port held by another server
    prints one error line naming the port and exits with status 2, no table."""
    manifests, (http_port, https_port) = quickstart_on_free_ports(tmp_path)
    server = await foreign_server(http_port)
    try:
        demo = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podway", "demo", "--once", "--manifests", str(manifests),
            "--http-port", str(http_port), "--https-port", str(https_port),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        async with asyncio.timeout(60):
            out, err = await demo.communicate()
    finally:
        server.close()
        await server.wait_closed()
    errors = [line for line in err.decode().splitlines() if line.startswith("error:")]
    assert demo.returncode == 2, (out.decode(), err.decode())
    assert len(errors) == 1, err.decode()
    assert f"127.0.0.1:{http_port}" in errors[0]
    assert "foreign" not in out.decode()
    assert "answered by" not in out.decode()
