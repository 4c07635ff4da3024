"""The test harness's ports: two asked for before either is bound never collide (an IR's
listeners got the same port from ``free_port`` once, and Envoy refused the second listener)."""

from __future__ import annotations

import pytest

from . import harness


def test_ports_asked_for_before_any_is_bound_are_all_different(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1,200 ports from a range of 12,000: drawn at random, about 60 pairs would collide."""
    monkeypatch.setattr(harness, "_GIVEN", set())
    ports = ([harness.free_port() for _ in range(1000)]
             + [harness.free_port_both() for _ in range(200)])
    assert len(set(ports)) == len(ports)
