"""The systemd units for an engine host outside the cluster: systemd accepts them, and every
flag they pass exists on the podway command they run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
PODWAY = str(Path(sys.executable).with_name("podway"))


def exec_start(unit: Path) -> list[str]:
    text = unit.read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    return line.removeprefix("ExecStart=").split()


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_every_flag_exists(unit: Path) -> None:
    """Each --flag of ExecStart is listed in `podway <command> --help`."""
    argv = exec_start(unit)
    command = [a for a in argv[1:3] if not a.startswith("-")]
    shown = subprocess.run([PODWAY, *command, "--help"], capture_output=True, text=True,
                           check=True, env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"}).stdout
    for flag in (a for a in argv if a.startswith("--")):
        assert re.search(rf"{re.escape(flag)}(?![\w-])", shown), f"{unit.name}: {flag} unknown"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    """systemd-analyze verify passes (with podway at this checkout's path); a broken unit
    fails it."""
    for unit in UNITS:
        (tmp_path / unit.name).write_text(unit.read_text().replace(
            "/opt/podway/bin/podway", PODWAY))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no",
                           *[str(tmp_path / u.name) for u in UNITS]],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    broken = tmp_path / "broken.service"
    broken.write_text("[Service]\nExecStart=podway engine\n")  # not an absolute path
    bad = subprocess.run(["systemd-analyze", "verify", "--man=no", str(broken)],
                         capture_output=True, text=True, check=False)
    assert bad.returncode != 0
