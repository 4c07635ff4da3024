"""Children tied to their parent: the preexec hook does no unsafe work after fork."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from podway.base.children import die_with_parent


def test_die_with_parent_loads_nothing_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preexec hook was resolved in the parent: the forked child never calls dlopen."""
    preexec = die_with_parent()
    assert preexec is not None

    def no_dlopen(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("dlopen in the forked child")

    monkeypatch.setattr(ctypes, "CDLL", no_dlopen)
    done = subprocess.run([sys.executable, "-c", "print('ran')"], preexec_fn=preexec,
                          capture_output=True, text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (0, "ran\n")


def test_child_of_a_parent_already_gone_exits_instead_of_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """If the parent is gone before prctl took effect (ppid changed), the child exits."""
    monkeypatch.setattr(os, "getpid", lambda: 1)  # "the parent" is a pid that is not ours
    preexec = die_with_parent()
    assert preexec is not None
    monkeypatch.undo()
    done = subprocess.run([sys.executable, "-c", "print('ran')"], preexec_fn=preexec,
                          capture_output=True, text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (1, "")
