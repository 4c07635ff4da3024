"""``podway run``'s prefetch process starts from the bare command line, before the command's
modules are imported (``podway.cli.commands.early``), and ``run`` takes that one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from podway.cli.commands import early

PROBE = """
import sys
from podway.cli.commands import early
from podway.sources import prefetch

made = []

class Recorded(prefetch.Prefetch):
    def __init__(self, root, **kwargs):
        made.append(("podway.cli.commands.run" in sys.modules, "podway.translate" in sys.modules))
        super().__init__(root, **kwargs)

prefetch.Prefetch = Recorded
handed = []
real_taken = early.taken

def taken(root):
    handed.append(real_taken(root))
    raise SystemExit(0)

early.taken = taken
sys.argv = ["podway", "run", "--manifests", sys.argv[1], "--no-engine"]
from podway.cli.app import main
try:
    main()
except SystemExit:
    pass
print(made, [type(p).__name__ for p in handed])
"""


def test_the_prefetch_starts_before_the_run_command_is_imported_and_run_takes_it(
        tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    # one process, started with neither the run command nor the translator imported yet,
    # and the one run took
    assert out.strip() == "[(False, False)] ['Recorded']"


@pytest.mark.parametrize(("args", "expected"), [
    (["--manifests", "a"], "a"),
    (["--manifests=a"], "a"),
    (["--http-port", "8080", "--manifests", "a", "--log-level", "info"], "a"),
    (["--manifests", "a", "--manifests=b"], "b"),  # click keeps the last
    (["--manifests"], None),  # no value: typer says so
    (["--", "--manifests", "a"], None),  # after "--": no option
    ([], None),
    (["--manifests-x", "a"], None),
])
def test_the_folder_is_read_as_click_reads_it(args: list[str], expected: str | None) -> None:
    assert early.manifests_of(args) == expected


def test_only_run_with_a_folder_starts_one(tmp_path: Path) -> None:
    for argv in (["validate", "--manifests", str(tmp_path)], ["run"],
                 ["run", "--manifests", str(tmp_path / "absent")]):
        early.start(argv)
        assert early.taken(tmp_path) is None


def test_one_started_for_another_folder_is_stopped_and_not_handed_over(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    early.start(["run", "--manifests", str(tmp_path / "a")])
    started = early._started[-1]
    assert early.taken(tmp_path / "b") is None
    assert started._process is None  # closed: the worker is stopped and reaped
    assert early._started == []


def test_the_same_folder_is_handed_over_once(tmp_path: Path) -> None:
    early.start(["run", "--manifests", str(tmp_path)])
    prefetch = early.taken(Path(str(tmp_path) + "/."))
    try:
        assert prefetch is not None
        assert early.taken(tmp_path) is None
    finally:
        if prefetch is not None:
            prefetch.close()
