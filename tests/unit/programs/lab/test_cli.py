"""``podway lab`` refuses clearly: one line, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    code = ("import os, sys; os.geteuid = lambda: 1000; from podway.cli.app import main; "
            "sys.argv = ['podway', *sys.argv[1:]]; main()")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=False, timeout=60)


@pytest.mark.parametrize("command", ["up", "down", "curl"])
def test_commands_that_touch_the_kernel_need_root(command: str) -> None:
    """Without root: one line saying so and how, exit status 2."""
    args = [command, "http://198.19.1.1/"] if command == "curl" else [command]
    done = run("lab", *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: podway lab {command} needs root (it creates network namespaces and kernel "
        "rules): run it with sudo"]


def test_reading_a_lab_that_is_not_up_says_how_to_start_one(tmp_path: Path) -> None:
    """``get`` with no lab: one line naming ``podway lab up``."""
    done = run("lab", "get", "pods", "--state-dir", str(tmp_path / "none"))
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: no lab 'lab' is up (start one with "
                                   f"`podway lab up --state-dir {tmp_path / 'none'}`)")


def test_hints_name_the_lab_they_are_about(tmp_path: Path) -> None:
    """A lab with --name/--state-dir: every command a hint suggests names it again (a bare
    `podway lab status` would ask the default lab and fail)."""
    from podway.cli.commands.lab import next_steps

    done = run("lab", "get", "pods", "--name", "x", "--state-dir", str(tmp_path / "none"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: no lab 'x' is up (start one with `podway lab up --name x --state-dir "
        f"{tmp_path / 'none'}`)")
    steps = next_steps("x", None, tmp_path / "kubeconfig")
    assert steps[1] == ("podway lab apply --name x -f examples/seed-httpd/ && "
                        "podway lab status --name x")
    assert next_steps("lab", None, tmp_path / "k")[1] == (
        "podway lab apply -f examples/seed-httpd/ && podway lab status")


def test_kubectl_as_names_service_accounts_as_kubectl_does() -> None:
    """``--as NAMESPACE/NAME`` is the ServiceAccount's user; other names pass as they are; a
    malformed account is refused in one line."""
    from podway.base.errors import ConfigError
    from podway.cli.commands.lab import account_user

    assert account_user("podway/podway-agent") == "system:serviceaccount:podway:podway-agent"
    assert account_user("jane") == "jane"
    with pytest.raises(ConfigError, match="NAMESPACE/NAME"):
        account_user("podway/")


def test_the_daemon_is_started_as_isolated_as_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``podway lab up`` run with ``-I`` starts its daemon with ``-I`` too (no ``PYTHONPATH``,
    no user site-packages in the child)."""
    import types

    from podway.base import children  # noqa: F401 (imported before sys.flags is replaced)
    from podway.cli.commands import lab

    started: list[list[str]] = []

    def popen(argv: list[str], **_: object) -> None:
        started.append(argv)
        raise OSError("not started: the test reads the command line only")

    monkeypatch.setattr(sys, "flags", types.SimpleNamespace(
        isolated=1, ignore_environment=1, no_user_site=1))
    monkeypatch.setattr(lab.subprocess, "Popen", popen)
    state = types.SimpleNamespace(logs=tmp_path, root=tmp_path)
    with pytest.raises(OSError, match="not started"):
        lab._start_daemon(state, status=types.SimpleNamespace(update=lambda _: None),
                          console=None)  # type: ignore[arg-type]
    assert started == [[sys.executable, "-I", "-m", "podway.programs.lab.daemon",
                        str(tmp_path)]]
