"""``podway run`` serves with the garbage collector policy, as ``podway controller`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.programs import standalone
from podway.programs.gc_policy import GcPolicy


def test_run_serves_with_the_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The options ``podway run`` builds carry ``GcPolicy()``."""
    from podway.cli.commands.run import run

    seen: list[standalone.StandaloneOptions] = []

    class Recorded:
        def __init__(self, opts: standalone.StandaloneOptions, **_: object) -> None:
            seen.append(opts)

        async def run(self) -> None:
            return

    monkeypatch.setattr(standalone, "Standalone", Recorded)
    run(manifests=tmp_path, no_engine=True, xds_address="unix:" + str(tmp_path / "x.sock"))
    assert [o.gc for o in seen] == [GcPolicy()]
