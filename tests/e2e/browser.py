"""A real headless Chromium for tests, driven over the DevTools protocol (aiohttp websocket).

``Browser.start`` launches Debian's ``chromium`` with its own profile directory and an
ephemeral DevTools port (read back from its stderr), opens one page and speaks CDP to it:
navigate, evaluate a JavaScript expression, capture a PNG. ``stop`` kills the process and waits
for it, also when the test failed. Without a ``chromium`` binary, ``find_chromium`` says why the
test must skip.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import aiohttp

_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, process: asyncio.subprocess.Process, session: aiohttp.ClientSession,
                 ws: aiohttp.ClientWebSocketResponse) -> None:
        self.process, self.session, self.ws = process, session, ws
        self._ids = itertools.count(1)
        self._stderr: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, binary: str, profile: Path) -> Browser:
        process = await asyncio.create_subprocess_exec(
            binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--disable-extensions", "--window-size=1280,1600",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            f"--user-data-dir={profile}", "about:blank",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE)
        session = aiohttp.ClientSession()
        try:
            assert process.stderr is not None
            async with asyncio.timeout(60):
                while True:
                    line = await process.stderr.readline()
                    if not line:
                        raise RuntimeError("chromium exited before its DevTools came up")
                    found = _LISTENING.search(line)
                    if found:
                        break
            http = found.group(1).decode().replace("ws://", "http://").split("/devtools")[0]
            async with session.get(f"{http}/json/list") as response:
                targets = await response.json()
            page = next(t for t in targets if t.get("type") == "page")
            ws = await session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        except BaseException:
            await session.close()
            await _kill(process)
            raise
        browser = cls(process, session, ws)
        # Keep reading stderr so chromium never blocks on a full pipe.
        browser._stderr = asyncio.create_task(_drain(process.stderr), name="chromium-stderr")
        return browser

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self.ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        async with asyncio.timeout(30):
            while True:
                message = await self.ws.receive()
                if message.type is not aiohttp.WSMsgType.TEXT:
                    raise RuntimeError(f"DevTools connection ended: {message.type}")
                data = json.loads(message.data)
                if data.get("id") == ident:
                    if "error" in data:
                        raise RuntimeError(f"{method}: {data['error']}")
                    result: dict[str, Any] = data.get("result", {})
                    return result

    async def navigate(self, url: str) -> None:
        await self.call("Page.enable")
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, limit_s: float) -> Any:
        """The first truthy value of ``expression`` (polled: the page updates on its own)."""
        async with asyncio.timeout(limit_s):
            while True:
                with contextlib.suppress(RuntimeError):
                    value = await self.evaluate(expression)
                    if value:
                        return value
                await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> Path:
        result = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(result["data"]))
        return path

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        await self.session.close()
        await _kill(self.process)
        if self._stderr is not None:
            self._stderr.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stderr


async def _drain(stream: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        while await stream.read(65536):
            pass


async def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    await process.wait()
