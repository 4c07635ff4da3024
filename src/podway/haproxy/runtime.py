"""The HAProxy runtime API (the worker's admin socket) and the master CLI: one command per
connection, the answer read to the end.

The sockets live in the engine's private folder with mode 0600: whoever can write them can
change every route and member, so only Podway's own user can.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from podway.base.errors import PodwayError


class RuntimeApiError(PodwayError):
    """HAProxy refused a runtime command or did not answer."""


# Answers that mean a command failed (HAProxy answers in words, not codes).
_FAILED = ("Unknown command", "No such", "unknown", "Require ", "not found", "Invalid",
           "failed", "cannot", "Can't", "error", "Error")


async def command(socket: Path, line: str, *, limit_s: float = 5.0) -> str:
    """Send one command; its whole answer."""
    async with asyncio.timeout(limit_s):
        reader, writer = await asyncio.open_unix_connection(str(socket))
        try:
            writer.write(line.encode() + b"\n")
            await writer.drain()
            return (await reader.read()).decode(errors="replace")
        finally:
            writer.close()


async def checked(socket: Path, line: str) -> str:
    """Send one command that must succeed (an answer naming an error raises)."""
    answer = await command(socket, line)
    if any(word in answer for word in _FAILED):
        raise RuntimeApiError(f"haproxy refused {line.split(' ', 3)[:3]}: {answer.strip()[:200]}")
    return answer


async def replace_map(socket: Path, path: str, rows: tuple[tuple[str, str], ...]) -> None:
    """Swap a map's whole content atomically, in order (``prepare``/``add``/``commit``): a
    request sees the old rows or the new ones, never a mix."""
    answer = await checked(socket, f"prepare map {path}")
    version = answer.strip().rsplit(" ", 1)[-1]
    if not version.isdigit():
        raise RuntimeApiError(f"haproxy gave no map version: {answer.strip()[:200]}")
    for key, value in rows:
        await checked(socket, f"add map @{version} {path} {key} {value}")
    await checked(socket, f"commit map @{version} {path}")


async def worker_pid(socket: Path) -> int | None:
    """The pid of the worker answering on the runtime socket (None: none answers)."""
    try:
        info = await command(socket, "show info", limit_s=2.0)
    except (OSError, TimeoutError):
        return None
    for line in info.splitlines():
        if line.startswith("Pid: "):
            return int(line.split(": ", 1)[1])
    return None
