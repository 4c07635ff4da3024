"""Stopping Envoy: drained only when it serves a listener. A stop during start-up (Envoy up,
waiting for its first config) does not wait ``drain_s`` for connections that cannot exist."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from podway.envoy.engine.process import Engine, EngineOptions, _Envoy
from podway.envoy.engine.state import open_state


async def _fake_admin(path: Path, listeners: list[dict[str, object]], seen: list[str]
                      ) -> asyncio.Server:
    """An admin socket answering ``/listeners`` with ``listeners``, recording each request
    line; anything else gets an empty 200."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        line = head.split("\r\n", 1)[0]
        seen.append(line)
        body = json.dumps({"listener_statuses": listeners}) if " /listeners" in line else ""
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
        await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(answer, path=str(path))


async def _stop_with(short_dir: Path, listeners: list[dict[str, object]], drain_s: float
                     ) -> list[str]:
    seen: list[str] = []
    sock = short_dir / "admin.sock"
    server = await _fake_admin(sock, listeners, seen)
    try:
        await _stop_envoy(f"unix:{sock}", drain_s)
    finally:
        server.close()
    return seen


async def _stop_envoy(admin: str, drain_s: float) -> None:
    """``Engine._stop`` of a stand-in Envoy (``sleep``) whose admin is ``admin``; it exits."""
    child = await asyncio.create_subprocess_exec("sleep", "120")
    envoy = _Envoy(child.pid, os.pidfd_open(child.pid), child)
    engine = Engine(EngineOptions(envoy_path=Path("/bin/true"), bootstrap={}, drain_s=drain_s))
    try:
        with open_state(None) as state:
            async with asyncio.timeout(30):
                await engine._stop(state, envoy, admin)
        assert envoy.exited
    finally:
        envoy.close()
        if child.returncode is None:
            child.kill()
            await child.wait()


async def test_an_envoy_without_listeners_is_stopped_without_a_drain(short_dir: Path) -> None:
    """No listener: no drain asked and no ``drain_s`` wait (60 s here, the test's limit is
    30 s): SIGTERM at once."""
    seen = await _stop_with(short_dir, [], drain_s=60)
    assert seen == ["GET /listeners?format=json HTTP/1.1"]


async def test_an_envoy_with_a_listener_is_drained_first(short_dir: Path) -> None:
    listener = {"name": "l", "local_address": {"socket_address": {
        "address": "127.0.0.1", "port_value": 8080}}}
    seen = await _stop_with(short_dir, [listener], drain_s=0.2)
    # Stop accepting at once (a successor takes the new connections), the HTTP ones told to
    # close, then wait for the open connections: none here (the stats answer empty).
    assert seen == ["GET /listeners?format=json HTTP/1.1",
                    "POST /drain_listeners?graceful&skip_exit HTTP/1.1",
                    "POST /drain_listeners HTTP/1.1",
                    "GET /stats?filter=%5Elistener%5C..%2A%5C.downstream_cx_active%24 HTTP/1.1"]


async def test_an_envoy_whose_admin_is_not_up_is_stopped_without_a_drain(
        short_dir: Path) -> None:
    """Envoy still starting (its admin socket not there yet): nothing to drain (``drain_s``
    60 s, the test's limit 30 s)."""
    await _stop_envoy(f"unix:{short_dir / 'none.sock'}", 60)
