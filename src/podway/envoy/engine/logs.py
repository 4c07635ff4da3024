"""Envoy's log: a file in the state folder, followed into Podway's log line by line.

Envoy's stderr is a file (``envoy.log``, opened append-only), not a pipe: a pipe would break when
Podway dies, and the Envoy that outlives Podway must keep logging somewhere; the next Podway
follows the same file from its end. The file is cut back to empty once it passes
``MAX_LOG_BYTES`` and Podway has read all of it (append-only writers then continue at the start;
a line written in that instant may be lost).

Each line is logged with Envoy's level mapped to ours; a line longer than ``max_line`` is
logged truncated, never fatal (a config dump in an error is long).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

envoy_log = logging.getLogger("podway.envoy")

MAX_LOG_BYTES = 8 * 1024 * 1024
_MAX_LOG_LINE = 8192  # bytes of one Envoy line that reach our log
_POLL_S = 0.1
_LEVEL = re.compile(r"^\[[^\]]*\]\[(\w+)\]")
_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}


LineHook = Callable[[str], None]


async def follow(path: Path, stop: asyncio.Event, *, offset: int | None,
                 max_bytes: int = MAX_LOG_BYTES, on_line: LineHook | None = None) -> None:
    """Log what is in ``path`` from ``offset`` (None: its end now) until ``stop`` is set, then
    what is left; ``on_line`` also sees each line (as logged)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    stream = asyncio.StreamReader(limit=64 * 1024)
    consumer = asyncio.ensure_future(pipe_log(stream, on_line=on_line))
    try:
        with open(path, "rb") as file:  # noqa: ASYNC230 - a local file, read in small chunks
            file.seek(0, os.SEEK_END)
            if offset is not None and offset <= file.tell():
                file.seek(offset)
            while True:
                chunk = file.read(64 * 1024)
                if chunk:
                    stream.feed_data(chunk)
                    continue
                if stop.is_set():
                    break
                size = os.fstat(file.fileno()).st_size
                if size < file.tell():  # cut back by someone else: start over
                    file.seek(0)
                elif file.tell() >= max_bytes:
                    os.truncate(path, 0)
                    file.seek(0)
                await asyncio.sleep(_POLL_S)  # a file has no readiness to wait on
    finally:
        stream.feed_eof()
        await consumer


async def pipe_log(stream: asyncio.StreamReader, *, max_line: int = _MAX_LOG_LINE,
                   on_line: LineHook | None = None) -> None:
    """Log each line until EOF; of a long line (over the stream's limit or ``max_line``), only
    its first ``max_line`` bytes."""
    skipping = False  # inside an over-long line whose first part was already logged
    while True:
        try:
            line = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # EOF; maybe a last line without newline
            if exc.partial and not skipping:
                _log_line(exc.partial, max_line, on_line=on_line)
            return
        except asyncio.LimitOverrunError as exc:
            chunk = await stream.read(exc.consumed)
            if not skipping:
                _log_line(chunk, max_line, truncated=True, on_line=on_line)
            skipping = True
            continue
        if skipping:
            skipping = False  # the end of the over-long line
            continue
        _log_line(line, max_line, on_line=on_line)


def _log_line(line: bytes, max_line: int, *, truncated: bool = False,
              on_line: LineHook | None = None) -> None:
    if len(line) > max_line:
        line, truncated = line[:max_line], True
    text = line.decode("utf-8", "replace").rstrip()
    match = _LEVEL.match(text)
    level = _LEVELS.get(match.group(1), logging.INFO) if match else logging.INFO
    envoy_log.log(level, "%s%s", text, " …(truncated)" if truncated else "")
    if on_line is not None:
        on_line(text)
