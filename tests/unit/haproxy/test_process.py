"""The HAProxy supervisor's restart backoff: consecutive failures only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from podway.haproxy import process as supervisor
from podway.haproxy.process import HAProxyEngine, HAProxyOptions


class _Master:
    """A stand-in master process that exits after ``lives_s``."""

    def __init__(self, lives_s: float) -> None:
        self.lives_s = lives_s

    async def wait(self) -> int:
        await asyncio.sleep(self.lives_s)
        return 1


async def test_a_master_that_lived_long_enough_starts_the_backoff_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three quick deaths double the delay; one that served ``stable_after_s`` resets it, as
    the Envoy engine's supervisor does (before, the count only grew: a master that died once a
    day waited ever longer, up to the cap)."""
    lives = [0.0, 0.0, 0.0, 0.3, 0.0, 0.0]
    counted: list[int] = []
    done = asyncio.Event()

    class Recording(supervisor.Backoff):
        def delay(self, failures: int, *, retry_after: float | None = None) -> float:
            counted.append(failures)
            return 0.0

    engine = HAProxyEngine(HAProxyOptions(folder=tmp_path / "h", stable_after_s=0.2))

    async def start() -> None:
        if len(counted) >= len(lives):
            done.set()
            await asyncio.Event().wait()
        engine._process = _Master(lives[len(counted)])  # type: ignore[assignment]

    async def stop() -> None:
        engine._process = None

    monkeypatch.setattr(supervisor, "Backoff", Recording)
    monkeypatch.setattr(engine, "_start", start)
    monkeypatch.setattr(engine, "_stop", stop)
    monkeypatch.setattr(engine, "_write", lambda rendered: None)
    engine._rendered = object()  # type: ignore[assignment]
    engine._process = _Master(lives[0])  # type: ignore[assignment]
    task = asyncio.create_task(engine.run())
    try:
        async with asyncio.timeout(10):
            await done.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert counted[:5] == [1, 2, 3, 1, 2]
