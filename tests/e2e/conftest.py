"""Fixtures for end-to-end tests: a fresh stack per test, always torn down."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
