"""The controller applies its garbage collector policy while it serves, and only when asked:
the command asks (``podway controller`` → ``GcPolicy()``); an embedded controller does not."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from podway.programs.controller import main
from podway.programs.gc_policy import GcPolicy

from .bed import Bed, cluster_service


async def test_policy_applied_after_the_first_state_and_undone_at_stop(bed: Bed) -> None:
    """With ``gc``: no automatic collection, the heap frozen once the first state is in;
    stopped: the process's collector is as it was."""
    bed.emu.put("services", cluster_service("web"))
    controller = await bed.start(gc=GcPolicy(quiet_s=0.01))
    await asyncio.wait_for(controller.gc_first_settle.wait(), 20)
    assert controller.pipeline is not None
    assert controller.pipeline.state is not None
    assert controller.gc_settled is not None
    assert controller.gc_settled.frozen > 0
    assert gc.get_freeze_count() > 0  # (frozen objects freed since leave the count)
    assert not gc.isenabled()
    await bed.stop_controller()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_command_serves_with_the_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    """``podway controller`` hands the controller ``GcPolicy()``."""
    from podway.cli.commands.controller import controller

    seen: list[main.ControllerOptions] = []

    class Recorded:
        def __init__(self, opts: main.ControllerOptions, **_: Any) -> None:
            seen.append(opts)

        async def run(self) -> None:
            return

    monkeypatch.setattr(main, "Controller", Recorded)
    controller(kubeconfig=str(tmp_path / "kubeconfig"), xds_listen="127.0.0.1:18000",
               xds_unauthenticated=True, leader_elect="false", log_level="warning")
    assert [o.gc for o in seen] == [GcPolicy()]
