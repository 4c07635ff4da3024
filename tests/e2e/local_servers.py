"""Loopback servers and stacks the e2e tests share: an aiohttp app as a stack's service, a
real nginx with one ``server`` block, and a stack torn down at the end of a block."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from podway.base.children import die_with_parent

from .harness import Stack, make_stack


@contextlib.asynccontextmanager
async def stack_in(tmp_path: Path, **options: Any) -> AsyncIterator[Stack]:
    """A stack (``make_stack`` ``options``) on manifests in ``tmp_path``, stopped after."""
    root = tmp_path / "manifests"
    root.mkdir()
    made = await make_stack(root, **options)
    try:
        yield made
    finally:
        await made.stop()


async def serve(stack: Stack, name: str, handler: Any) -> int:
    """``handler`` (an aiohttp handler) answering every method and path on an ephemeral
    loopback port until the stack stops; the port."""
    from aiohttp import web

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return await serve_app(stack, name, app)


async def serve_app(stack: Stack, name: str, app: Any) -> int:
    """The aiohttp ``app`` on an ephemeral loopback port until the stack stops; the port."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    stack.tasks.append(asyncio.create_task(close(), name=name))
    return port


@contextlib.asynccontextmanager
async def nginx(folder: Path, port: int, server: str, *, http: Sequence[str] = ()
                ) -> AsyncIterator[None]:
    """A real nginx with one ``server`` block (``PORT`` in it: ``port``), ``http`` directives
    added, its own temp folders; listening before the block runs, stopped after."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    folder.mkdir()
    conf = folder / "nginx.conf"
    conf.write_text("\n".join([
        "daemon off;", "master_process off;", f"pid {folder}/nginx.pid;",
        f"error_log {folder}/error.log warn;", "events { worker_connections 64; }", "http {",
        "access_log off;", *http, f"client_body_temp_path {folder}/body;",
        f"proxy_temp_path {folder}/proxy;", f"fastcgi_temp_path {folder}/fastcgi;",
        f"uwsgi_temp_path {folder}/uwsgi;", f"scgi_temp_path {folder}/scgi;",
        server.replace("PORT", str(port)), "}", ""]))
    proc = await asyncio.create_subprocess_exec(
        binary, "-p", str(folder), "-c", str(conf), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, preexec_fn=die_with_parent())
    try:
        await listening(port, proc, folder / "error.log")
        yield
    finally:
        await stop(proc)


async def stop(proc: asyncio.subprocess.Process) -> None:
    """End a process this test started: SIGTERM, SIGKILL after 10 s."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def listening(port: int, proc: asyncio.subprocess.Process, log: Path) -> None:
    """Once ``proc`` accepts connections on loopback ``port`` (20 s at most); if it exits
    first, fails with its ``log``."""
    async with asyncio.timeout(20):
        while True:
            assert proc.returncode is None, log.read_text() if log.exists() else "exited"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return
