"""Fixtures for end-to-end tests: a fresh stack per test, always torn down."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from podway.envoy.engine.adopt import read_identity, terminate_stale
from podway.envoy.engine.state import StateDir

from .harness import Stack, make_stack


@pytest.fixture
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """A stack on delta xDS; ``indirect`` parametrisation with "sotw" switches the protocol."""
    root = tmp_path / "manifests"
    root.mkdir()
    made = await make_stack(root, delta=getattr(request, "param", "delta") == "delta")
    try:
        yield made
    finally:
        await made.stop()


@pytest.fixture(params=["envoy", "haproxy"])
async def engine_stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """A stack on each engine in turn: the same routing tests hold for Envoy and HAProxy."""
    root = tmp_path / "manifests"
    root.mkdir()
    made = await make_stack(root, engine_kind=request.param)
    try:
        yield made
    finally:
        await made.stop()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short folder under /tmp for state folders: unix socket paths must fit 107 bytes,
    which pytest's tmp_path often does not leave room for."""
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    try:
        yield path
    finally:
        # An Envoy outlives a killed Podway by design: end any a failed test left behind.
        for folder in path.iterdir():
            record = read_identity(StateDir(folder))
            if record is not None:
                terminate_stale(record)
        shutil.rmtree(path, ignore_errors=True)
