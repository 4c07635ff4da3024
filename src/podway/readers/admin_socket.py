"""The admin endpoint's socket, and its answer before the first state: no web framework.

The admin endpoint (``podway.readers.admin_api``) is aiohttp's; importing it (aiohttp, explain,
the status document) took ~0.15 CPU-s in the main process while it parsed and translated its
first configuration, all on the way to a cold start's first push (docs/performance.md, "Cold
start: the parse starts with the process"). So ``podway.readers.surfaces`` checks and binds the
socket here at the start (its folder checked before anything is served, as always), answers
every request with the endpoint's own "no state yet" (``answer_for_now``) until the first state
is published, and only then imports the endpoint and hands it the same listening socket: a
client never finds the socket missing, and is never kept waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
from pathlib import Path

from podway.base.errors import ConfigError

#: The admin endpoint's answer to any request before the first state (503, as JSON).
NOT_YET = "no state yet: the first update is not applied"
_REQUEST_LIMIT = 64 * 1024  # bytes of a request head read before the answer
_REQUEST_TIMEOUT_S = 5.0


MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the NUL


def check_socket(path: Path) -> None:
    """A usable admin socket path: short enough for a unix socket, in a private folder (made
    0700 when missing); ``ConfigError`` with one line otherwise."""
    if len(os.fsencode(path.absolute())) > MAX_SOCKET_PATH:
        raise ConfigError(f"admin socket path {path} is longer than {MAX_SOCKET_PATH} bytes, "
                          "the limit of a unix socket; choose a shorter one")
    if path.exists() and not stat.S_ISSOCK(path.lstat().st_mode):
        raise ConfigError(f"admin socket path {path} exists and is not a socket")
    private_folder(path.parent)
    if path.exists() and _answers(path):
        raise ConfigError(f"admin socket {path} is in use by another running Podway")


def _answers(path: Path) -> bool:
    """Does something accept connections on the unix socket ``path``?"""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


def private_folder(folder: Path) -> None:
    """Make ``folder`` (mode 0700) or check that an existing one is ours and private."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.lstat()
    except OSError as exc:
        raise ConfigError(f"admin socket folder {folder}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"admin socket folder {folder} is not a directory")
    if info.st_uid != os.geteuid():
        raise ConfigError(f"admin socket folder {folder} belongs to another user")
    if info.st_mode & 0o077:
        raise ConfigError(f"admin socket folder {folder} is open to other users (mode "
                          f"{stat.S_IMODE(info.st_mode):o}); use a folder of mode 0700")


def bind(path: Path) -> socket.socket:
    """A unix socket listening on ``path`` (a left-over file there is replaced: ``check_socket``
    found nobody serving it), bound inside its private folder and narrowed to 0600 before it
    listens; non-blocking."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        sock.bind(str(path))
        path.chmod(0o600)
        sock.listen(64)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def close(sock: socket.socket, path: Path) -> None:
    """Stop listening on ``sock`` and remove its file ``path``."""
    sock.close()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


async def answer_for_now(sock: socket.socket) -> None:
    """Answer every HTTP request on ``sock`` with 503 and ``NOT_YET`` until cancelled; the
    socket stays open and listening (connections not yet accepted wait for its next owner)."""
    loop = asyncio.get_running_loop()
    answering: set[asyncio.Task[None]] = set()
    try:
        while True:
            conn, _ = await loop.sock_accept(sock)
            task = loop.create_task(_answer(loop, conn))
            answering.add(task)
            task.add_done_callback(answering.discard)
    finally:
        for task in answering:
            task.cancel()


_BODY = json.dumps({"error": NOT_YET}).encode()
_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          b"Content-Length: " + str(len(_BODY)).encode() + b"\r\nConnection: close\r\n\r\n"
          + _BODY)


async def _answer(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    """Read one request head (bounded in size and time), send ``_REPLY``, close."""
    with conn:
        conn.setblocking(False)
        head = b""
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                while b"\r\n\r\n" not in head and len(head) < _REQUEST_LIMIT:
                    data = await loop.sock_recv(conn, 4096)
                    if not data:
                        return
                    head += data
                await loop.sock_sendall(conn, _REPLY)
