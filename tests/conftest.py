"""Shared test options (``--update-golden`` rewrites golden files instead of comparing) and
the garbage collector restored after every test."""

from __future__ import annotations

import gc
from collections.abc import Iterator

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
