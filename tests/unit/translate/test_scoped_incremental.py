"""The incremental build of a listener served as scopes equals a build from scratch over the
general change sequences (Gateways, listeners switching scoped and not, wildcards, catch-alls,
persistence, TLS): ``test_incremental_equals_from_scratch`` with a threshold of one host."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings

from podway.model import Snapshot
from podway.xds import types

from .gateway_strategies import OUR_CLASS
from .test_incremental_routes import _apply, _parsed, _Run, steps, world


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world, steps)
def test_incremental_equals_from_scratch_served_as_scopes(start: list[Any],
                                                          sequence: list[Any]) -> None:
    objects = {}
    for doc in [OUR_CLASS, *start]:
        obj = _parsed(doc)
        if obj is not None:
            objects[(obj.KIND, obj.key)] = obj
    snapshot = Snapshot.of_objects(objects.values())
    run = _Run(snapshot, 1)
    for step in sequence:
        snapshot, changed = _apply(snapshot, step)
        built, got = run.step(snapshot, [changed] if changed is not None else [])
        event(f"scopes: {bool(built[types.SCOPE])}, patched: {got.change is not None}")
