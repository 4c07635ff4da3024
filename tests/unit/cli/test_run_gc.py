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


def test_the_command_is_imported_with_the_collector_paused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports make no cyclic garbage: the collections their allocations set off were ~10 % of
    ``podway run``'s import time. The collector is back on once the command module is in."""
    import gc
    import sys

    from podway.cli import app as cli_app
    from podway.cli import commands

    during: list[bool] = []

    def register(_app: object, _argv: list[str]) -> None:
        during.append(gc.isenabled())

    monkeypatch.setattr(commands, "register", register)
    monkeypatch.setattr(cli_app, "app", lambda: None)
    monkeypatch.setattr(sys, "argv", ["podway", "version"])
    assert gc.isenabled()
    cli_app.main()
    assert during == [False]
    assert gc.isenabled()


def test_run_imports_its_program_with_the_collector_paused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from podway.cli.commands.run import run

    during: list[bool] = []

    class Recorded:
        def __init__(self, opts: standalone.StandaloneOptions, **_: object) -> None:
            during.append(gc.isenabled())

        async def run(self) -> None:
            return

    monkeypatch.setattr(standalone, "Standalone", Recorded)
    real_import = __builtins__["__import__"] if isinstance(__builtins__, dict) \
        else __builtins__.__import__
    seen: list[bool] = []

    def spy(name: str, *args: object, **kwargs: object) -> object:
        if name == "podway.programs.standalone":
            seen.append(gc.isenabled())
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", spy)
    run(manifests=tmp_path, no_engine=True, xds_address="unix:" + str(tmp_path / "x.sock"))
    assert seen == [False]
    assert during == [True]  # the program itself runs under its own policy, not this pause
