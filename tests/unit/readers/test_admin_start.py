"""The admin endpoint from the start (``podway.readers.surfaces``, ``podway.readers.admin_socket``):
its socket listens at once (0600, in its checked private folder) and answers "no state yet"
without the endpoint's modules imported; once the first state is published the same socket
serves the endpoint, and a stop before that removes the socket."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from podway.base.errors import ConfigError
from podway.readers import surfaces
from podway.readers.admin_api import AdminUnavailable, get_json
from podway.readers.admin_socket import NOT_YET
from tests.unit.test_pipeline import WEB, pipeline, update


async def until_exists(path: Path) -> None:
    async with asyncio.timeout(10):
        while not path.exists():  # noqa: ASYNC110 - a test's poll of a file
            await asyncio.sleep(0.01)


async def test_before_the_first_state_the_socket_answers_no_state_yet_then_serves(
        tmp_path: Path) -> None:
    pipe, source = pipeline()
    path = tmp_path / "private" / "podway.sock"
    admin = asyncio.create_task(surfaces.serve(pipe, surfaces.SurfaceOptions(admin_socket=path)))
    run = asyncio.create_task(pipe.run())
    try:
        await until_exists(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        inode = path.stat().st_ino
        for endpoint in ("/state", "/health", "/config", "/explain?url=http://x/"):
            with pytest.raises(AdminUnavailable, match=NOT_YET):
                await get_json(path, endpoint)
        source.queue.put_nowait(update(WEB))
        async with asyncio.timeout(10):
            while True:
                try:
                    data = await get_json(path, "/state")
                    break
                except AdminUnavailable:
                    await asyncio.sleep(0.01)
        assert data["generation"] == 1
        assert path.stat().st_ino == inode  # the same socket, handed over
    finally:
        for task in (admin, run):
            task.cancel()
        await asyncio.gather(admin, run, return_exceptions=True)
    assert not path.exists()


async def test_a_silent_client_does_not_hold_the_answer_to_others(tmp_path: Path) -> None:
    pipe, _ = pipeline()
    path = tmp_path / "podway.sock"
    path.parent.chmod(0o700)
    admin = asyncio.create_task(surfaces.serve(pipe, surfaces.SurfaceOptions(admin_socket=path)))
    try:
        await until_exists(path)
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(str(path))  # sends nothing
        try:
            with pytest.raises(AdminUnavailable, match=NOT_YET):
                await get_json(path, "/state", limit_s=5)
        finally:
            silent.close()
    finally:
        admin.cancel()
        await asyncio.gather(admin, return_exceptions=True)
    assert not path.exists()


async def test_the_folder_is_checked_before_anything_listens(tmp_path: Path) -> None:
    pipe, _ = pipeline()
    folder = tmp_path / "open"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    with pytest.raises(ExceptionGroup) as caught:
        await surfaces.serve(pipe, surfaces.SurfaceOptions(admin_socket=folder / "podway.sock"))
    assert caught.group_contains(ConfigError, match="open to other users")
    assert os.listdir(folder) == []


PROBE = """
import asyncio, sys
from pathlib import Path
from podway.readers import surfaces
from podway.readers.admin_socket import NOT_YET

class Waiting:  # a pipeline with no state yet
    state = None
    async def wait_for(self, predicate):
        await asyncio.Event().wait()

async def main():
    path = Path(sys.argv[1])
    options = surfaces.SurfaceOptions(admin_socket=path)
    task = asyncio.create_task(surfaces.serve(Waiting(), options))
    while not path.exists():
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(b"GET /state HTTP/1.1\\r\\nHost: podway\\r\\n\\r\\n")
    answer = await reader.read()
    print(answer.split(b"\\r\\n", 1)[0].decode(), NOT_YET.encode() in answer,
          "aiohttp" in sys.modules, "podway.readers.admin_api" in sys.modules)
    task.cancel()

asyncio.run(main())
"""


def test_no_state_yet_costs_no_web_framework_import(tmp_path: Path) -> None:
    """Before the first state the answer comes without aiohttp or the endpoint imported:
    that import was ~0.15 CPU-s on a cold start's way to its first push."""
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    out = subprocess.run([sys.executable, "-c", PROBE, str(folder / "podway.sock")],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.split() == ["HTTP/1.1", "503", "Service", "Unavailable", "True", "False",
                           "False"]
