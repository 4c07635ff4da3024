"""Pooled fields sets: objects of one shape share one set, nested models too; frozen models
stay equal and copies with updates never touch the shared set."""

from __future__ import annotations

import sys

from podway.model import Service
from podway.sources.sharing import FieldsSetPool
from tests import builders


def service(name: str, port: int = 80) -> Service:
    return Service.model_validate(builders.service(name, port, None, namespace="shop",
                                                   protocol=None))


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


def test_instance_dicts_share_their_key_table_and_mean_the_same() -> None:
    """After ``share`` a model's ``__dict__`` is never larger than pydantic's, and smaller once
    a shape is common (one key table per shape, PEP 412); it holds the very same values in the
    same order; the object equals, hashes (where it can) and dumps as a freshly parsed one; a
    copy with an update still works."""
    pool = FieldsSetPool()
    services = [service(f"s{i}", 1000 + i) for i in range(20)]
    before = [(sys.getsizeof(s.metadata.__dict__), dict(s.metadata.__dict__)) for s in services]
    for each in services:
        pool.share(each)
    for each, (size, values) in zip(services, before, strict=True):
        meta = each.metadata.__dict__
        assert meta == values
        assert all(meta[k] is v for k, v in values.items())
        assert list(meta) == list(values)  # the field order is kept
        assert sys.getsizeof(meta) <= size
    last = services[-1]
    assert sys.getsizeof(last.metadata.__dict__) < sys.getsizeof(dict(last.metadata.__dict__))
    assert sys.getsizeof(last.__dict__) < sys.getsizeof(dict(last.__dict__))
    fresh = service("s19", 1019)
    assert last == fresh
    assert hash(last.spec.ports[0]) == hash(fresh.spec.ports[0])
    assert last.model_dump() == fresh.model_dump()
    assert last.metadata.model_copy(update={"name": "c"}).name == "c"
    assert last.metadata.name == "s19"
    assert last.spec.ports[0].port == 1019
