"""Pooled fields sets: objects of one shape share one set, nested models too; frozen models
stay equal and copies with updates never touch the shared set."""

from __future__ import annotations

from typing import Any

from podway.model import Service
from podway.sources.sharing import FieldsSetPool


def service(name: str, port: int = 80) -> Service:
    raw: dict[str, Any] = {"apiVersion": "v1", "kind": "Service",
                           "metadata": {"name": name, "namespace": "shop"},
                           "spec": {"ports": [{"name": "http", "port": port}]}}
    return Service.model_validate(raw)


def test_same_shapes_share_one_set_and_copies_stay_apart() -> None:
    """Two Services of one shape: one metadata set, one port set, shared; equality and
    ``model_copy(update=...)`` behave as before; the pool holds shapes, not objects."""
    pool = FieldsSetPool()
    a, b = service("a"), service("b", 81)
    assert a.metadata.model_fields_set is not b.metadata.model_fields_set
    pool.share(a)
    pool.share(b)
    assert a.metadata.model_fields_set is b.metadata.model_fields_set
    assert a.spec.ports[0].model_fields_set is b.spec.ports[0].model_fields_set
    assert a.model_fields_set is b.model_fields_set
    assert a == service("a")
    before = set(a.metadata.model_fields_set)
    copied = a.metadata.model_copy(update={"labels": {"x": "y"}})
    assert "labels" in copied.model_fields_set
    assert a.metadata.model_fields_set == before  # the shared set did not move
    assert b.metadata.model_fields_set == before
    size = len(pool)
    for i in range(50):
        pool.share(service(f"s{i}", 1000 + i))
    assert len(pool) == size
