"""The incremental build of a listener served as scopes equals a build from scratch over the
general change sequences (Gateways, listeners switching scoped and not, wildcards, catch-alls,
persistence, TLS): ``test_incremental_equals_from_scratch`` with a threshold of one host."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from .test_incremental_routes import run_sequence, steps, world


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world, steps)
def test_incremental_equals_from_scratch_served_as_scopes(start: list[Any],
                                                          sequence: list[Any]) -> None:
    run_sequence(start, sequence, scoped_min=1)
