"""Shared test options (``--update-golden`` rewrites golden files instead of comparing), the
garbage collector restored after every test, and the one short temporary folder (``short_dir``).
"""

from __future__ import annotations

import gc
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files from the current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    """The collector as it was before each test, whatever the test did (the GC policy
    disables it and freezes the heap while a controller or ``run`` serves)."""
    enabled = gc.isenabled()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh folder with a short path under /tmp (mode 0700), removed after the test: unix
    socket paths must fit 107 bytes, which pytest's ``tmp_path`` often does not leave room for.
    Use ``tmp_path`` where no socket lives."""
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
