"""Fixtures for end-to-end tests: a fresh stack per test, always torn down."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from podway.envoy.engine.adopt import read_identity, terminate_stale
from podway.envoy.engine.state import StateDir

from .harness import Stack
from .local_servers import stack_in


@pytest.fixture
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """A stack on delta xDS; ``indirect`` parametrisation with "sotw" switches the protocol."""
    async with stack_in(tmp_path, delta=getattr(request, "param", "delta") == "delta") as made:
        yield made


@pytest.fixture(params=["envoy", "haproxy"])
async def engine_stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """A stack on each engine in turn: the same routing tests hold for Envoy and HAProxy."""
    async with stack_in(tmp_path, engine_kind=request.param) as made:
        yield made


@pytest.fixture
def short_dir(short_dir: Path) -> Iterator[Path]:
    """The shared short folder (tests/conftest.py) for state folders; after the test, an Envoy
    a failed test left behind in it is ended (it outlives a killed Podway by design)."""
    try:
        yield short_dir
    finally:
        for folder in short_dir.iterdir():
            record = read_identity(StateDir(folder))
            if record is not None:
                terminate_stale(record)
