"""Envoy's log file followed into Podway's log: from an offset, across a cut-back, bounded."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from podway.envoy.engine.logs import follow


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "podway.envoy"]


async def test_lines_after_the_offset_are_logged_then_what_is_left_at_stop(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Lines before the offset (an earlier Envoy's) are skipped; the rest, including what was
    written just before stop, reach the log with Envoy's level."""
    path = tmp_path / "envoy.log"
    path.write_bytes(b"[t][error] old\n")
    offset = path.stat().st_size
    stop = asyncio.Event()
    with caplog.at_level(logging.DEBUG, logger="podway.envoy"):
        task = asyncio.create_task(follow(path, stop, offset=offset))
        with path.open("ab") as file:
            file.write(b"[t][warning] new\n[t][info] last")
        stop.set()
        await asyncio.wait_for(task, 5)
    assert _lines(caplog) == ["[t][warning] new", "[t][info] last"]
    assert [r.levelno for r in caplog.records if r.name == "podway.envoy"] == [
        logging.WARNING, logging.INFO]


async def test_the_file_is_cut_back_once_read_past_its_bound(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Past ``max_bytes`` (all read) the file is emptied; lines appended after it still come."""
    path = tmp_path / "envoy.log"
    stop = asyncio.Event()
    with caplog.at_level(logging.DEBUG, logger="podway.envoy"):
        task = asyncio.create_task(follow(path, stop, offset=0, max_bytes=10))
        with path.open("ab") as file:  # append-only, as Envoy's stderr
            file.write(b"[t][info] " + b"x" * 20 + b"\n")
            file.flush()
            async with asyncio.timeout(5):
                while path.stat().st_size:  # noqa: ASYNC110 - follow polls the file; so do we
                    await asyncio.sleep(0.02)
            file.write(b"[t][info] after\n")
        stop.set()
        await asyncio.wait_for(task, 5)
    assert _lines(caplog) == ["[t][info] " + "x" * 20, "[t][info] after"]
    assert path.stat().st_size == len(b"[t][info] after\n")  # appended at the start again


async def test_a_missing_file_is_created_not_fatal(tmp_path: Path) -> None:
    """An adopted Envoy whose log file was removed: following starts on an empty file."""
    path = tmp_path / "envoy.log"
    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(follow(path, stop, offset=None), 5)
    assert path.exists()
    assert path.stat().st_mode & 0o777 == 0o600
