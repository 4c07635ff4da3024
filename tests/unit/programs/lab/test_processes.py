"""The lab's process supervisor: a process told to stop is not restarted, also when it was
between restarts (exited, waiting out its back-off) when it was told."""

from __future__ import annotations

import asyncio
from pathlib import Path

from podway.programs.lab.processes import Supervisor
from podway.programs.lab.state import LabState


async def test_a_process_between_restarts_is_not_restarted_once_told_to_stop(
        tmp_path: Path) -> None:
    state = LabState(tmp_path)
    state.logs.mkdir(parents=True)
    state.pids.mkdir(parents=True)
    supervisor = Supervisor(state)
    starts: list[int] = []
    restarted = asyncio.Event()

    def started() -> None:
        starts.append(1)
        if len(starts) == 2:
            restarted.set()

    item = await supervisor.start("crasher", ["sleep", "0.3"], on_start=started)
    try:
        await asyncio.wait_for(restarted.wait(), 10)  # it ended, restarted after a back-off
        second = item.proc
        assert second is not None
        await second.wait()  # ended again: the supervisor waits out a 0.4 s back-off now
        await supervisor.terminate("crasher", grace=1.0)
        await asyncio.sleep(1.5)  # well past the back-off
        assert len(starts) == 2
    finally:
        await supervisor.stop("crasher", grace=0.1)
