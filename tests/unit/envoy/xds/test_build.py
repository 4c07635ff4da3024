"""The builder: memo by identity, and endpoint-only changes touch only endpoints."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.ir import IR, Member

from .helpers import http_listener, ir, pool, route, vhost


def _ir() -> IR:
    listener = http_listener(vhost("a.com", route("r1", "/", "pool/a")))
    return ir((listener,), pool("pool/a", 9001), pool("pool/b", 9002))


def test_endpoint_change_changes_only_endpoint_type() -> None:
    """Replacing one pool's members moves the endpoint type's version and nothing else."""
    builder, cache = Builder(), Cache()
    first = _ir()
    cache.set(builder.build(first))
    changed_pool = replace(first.pools["pool/a"], members=(Member(address="127.0.0.1",
                                                                  port=9003),))
    second = IR(listeners=first.listeners,
                pools=MappingProxyType({**first.pools, "pool/a": changed_pool}))
    changes = cache.set(builder.build(second))
    assert set(changes) == {types.ENDPOINT}
    assert changes[types.ENDPOINT].updated == frozenset({"pool/a"})


def test_builder_reuses_resources_of_identical_nodes() -> None:
    """The same listener object is not rebuilt: the very same Resource object comes back."""
    builder = Builder()
    first = _ir()
    a = builder.build(first)
    b = builder.build(first)
    assert a[types.LISTENER]["listener/http"] is b[types.LISTENER]["listener/http"]
    assert a[types.ROUTE]["listener/http"] is b[types.ROUTE]["listener/http"]
    assert a[types.ENDPOINT]["pool/b"] is b[types.ENDPOINT]["pool/b"]


def test_equal_content_keeps_versions() -> None:
    """A fresh build of equal IR changes no type version (digests are content-addressed)."""
    cache = Cache()
    cache.set(Builder().build(_ir()))
    assert cache.set(Builder().build(_ir())) == {}


def test_removed_pool_is_reported_removed() -> None:
    """Dropping a pool removes its cluster and load assignment."""
    cache = Cache()
    first = _ir()
    cache.set(Builder().build(first))
    second = IR(listeners=first.listeners,
                pools=MappingProxyType({"pool/a": first.pools["pool/a"]}))
    changes = cache.set(Builder().build(second))
    assert changes[types.CLUSTER].removed == frozenset({"pool/b"})
    assert changes[types.ENDPOINT].removed == frozenset({"pool/b"})
