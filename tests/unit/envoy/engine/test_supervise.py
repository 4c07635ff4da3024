"""``podway engine``'s supervision: the member health reporter failing never stops Envoy, and a
junk admin answer is no view rather than a failure."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from podway.base.backoff import Backoff
from podway.cli.commands.engine import supervise
from podway.envoy.engine.health_report import ReportOptions, read_view


class FakeEngine:
    """Stands in for ``Engine``: ``run`` lasts until ``stop`` is set; counts cancellations."""

    admin_address = None

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.cancelled = 0

    async def run(self) -> None:
        try:
            await self.stop.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


async def test_a_failing_reporter_is_started_again_and_envoy_runs_on(
        caplog: pytest.LogCaptureFixture) -> None:
    """The reporter raises (a junk admin answer, a bug) twice: each is one log line, Envoy is
    not cancelled, the reporter runs again; Envoy's end stops the reporter."""
    engine = FakeEngine()
    runs: list[int] = []
    third = asyncio.Event()
    held = asyncio.Event()

    async def reporter() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise ExceptionGroup("in a TaskGroup", [ValueError("bad chunk size\nmore")])
        third.set()
        await held.wait()  # runs until cancelled

    report = ReportOptions(node_id="e", xds="unix:/nowhere",
                           backoff=Backoff(base=0.001, cap=0.001))
    with caplog.at_level(logging.ERROR, logger="podway.cli.commands.engine"):
        task = asyncio.create_task(supervise(engine, report,  # type: ignore[arg-type]
                                             reporter=reporter))
        async with asyncio.timeout(10):
            await third.wait()
        assert not task.done()
        assert engine.cancelled == 0
        engine.stop.set()
        async with asyncio.timeout(10):
            await task
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert all("(ValueError: bad chunk size)" in line and "\n" not in line for line in lines)
    assert len(runs) == 3


async def test_a_junk_admin_answer_is_no_view(short_dir: Path) -> None:
    """A chunked answer whose chunk size is not hex: None (keep the last view), no exception
    (``admin.request`` raises it as the ConnectionError every admin caller catches)."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the whole request first: no reset
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nx\r\n")
        await writer.drain()
        writer.close()

    path = short_dir / "admin.sock"
    server = await asyncio.start_unix_server(answer, path=str(path))
    try:
        assert await read_view(f"unix:{path}") is None
    finally:
        server.close()
        await server.wait_closed()
