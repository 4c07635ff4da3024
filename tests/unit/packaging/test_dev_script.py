"""``./dev``'s first run says what it does at every step (it takes a minute or two), and a failed
install fails it. Run against a stand-in ``python3`` so no package is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

FAKE_PYTHON = """#!/bin/sh
# A stand-in python3: `-m venv DIR` makes DIR/bin/python (this script); `-m pip install` prints
# what pip prints while it fetches and installs, or fails when FAIL_PIP is set.
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    case "$*" in *--upgrade*) exit 0 ;; esac
    echo "Obtaining file:///src"
    echo "Collecting pydantic>=2.7 (from podway==0.1.0)"
    echo "  Using cached pydantic-2.9.0-py3-none-any.whl (434 kB)"
    echo "Collecting typer>=0.12 (from podway==0.1.0)"
    if [ -n "$FAIL_PIP" ]; then echo "ERROR: No matching distribution found for typer"; exit 1; fi
    echo "Installing collected packages: pydantic, typer, podway"
    echo "Successfully installed podway-0.1.0 pydantic-2.9.0 typer-0.12.0"
    exit 0
fi
exit 0
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "repo"
    work.mkdir(exist_ok=True)
    shutil.copy(ROOT / "dev", work / "dev")
    if not (work / "pyproject.toml").exists():  # unchanged after the first run: no reinstall
        (work / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return subprocess.run(
        ["bash", str(work / "dev"), "shell"], cwd=work, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60, check=False,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SHELL": "/bin/true",
             "PODWAY_VENV": str(tmp_path / "venv"), "HOME": str(tmp_path), **env})


def test_the_first_run_says_each_step_and_each_package(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines == [
        f"dev: first run, step 1/3: creating the virtualenv {tmp_path / 'venv'}",
        "dev: first run, step 2/3: updating pip",
        f"dev: step 3/3: installing Podway and its dependencies into {tmp_path / 'venv'} "
        "(a minute or two)",
        "dev:   [1] Obtaining file:///src",
        "dev:   [2] Collecting pydantic>=2.7",
        "dev:   [3] Collecting typer>=0.12",
        "dev:   installing 3 packages...",
        "dev: installed",
    ]
    again = _run(tmp_path)  # installed and unchanged: silent
    assert again.returncode == 0
    assert again.stderr == ""


def test_a_failed_install_fails_the_command_and_shows_why(tmp_path: Path) -> None:
    done = _run(tmp_path, FAIL_PIP="1")
    assert done.returncode != 0
    assert "ERROR: No matching distribution found for typer" in done.stderr
    assert "dev: installed" not in done.stderr
    assert not (tmp_path / "venv" / ".podway-installed").exists()
    assert os.path.exists(tmp_path / "venv" / "bin" / "python")
