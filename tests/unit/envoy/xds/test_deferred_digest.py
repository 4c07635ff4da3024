"""A route table keeps its version (digest) while its bytes stay the same, whether or not its
listener is served as scopes (``xds.cache``: "a resource's version is the digest of its
bytes"): the one-table form of a scoped listener is deferred and digested from its parts."""

from __future__ import annotations

from types import MappingProxyType

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.ir import IR, IRChange, Listener
from podway.ir import ListenerProtocol as Protocol

from .helpers import pool, route, vhost


def _listener(name: str, port: int, *hosts: str) -> Listener:
    return Listener(name=name, address="127.0.0.1", port=port, protocol=Protocol.HTTP,
                    virtual_hosts=tuple(vhost(h, route(f"r-{h}", "/", "p")) for h in hosts))


def test_a_table_no_longer_served_as_scopes_keeps_its_version_when_its_bytes_stay() -> None:
    """Another listener outgrows the scoped one and takes the scopes: the first one's table
    is the same bytes as before, so the cache must not see it changed (a state-of-the-world
    engine would be sent, and apply, the whole unchanged table again)."""
    pools = MappingProxyType({"p": pool("p", 8081)})
    big = _listener("listener/a", 8080, "a1.ex", "a2.ex", "a3.ex")
    small = _listener("listener/b", 8081, "b1.ex")
    ir = IR(listeners=(big, small), pools=pools)
    builder, cache = Builder(scoped_min_hosts=2), Cache()
    first = builder.build(ir)
    assert "listener/a/host/a1.ex" in first[types.SCOPE]  # listener/a is served as scopes
    cache.set(first, hint=builder.hint)
    added = tuple(vhost(h, route(f"r-{h}", "/", "p")) for h in ("b2.ex", "b3.ex", "b4.ex"))
    grown = Listener(name="listener/b", address="127.0.0.1", port=8081, protocol=Protocol.HTTP,
                     virtual_hosts=small.virtual_hosts + added)
    after = IR(listeners=(big, grown), pools=pools)
    built = builder.build(after, IRChange(base=ir, vhosts=MappingProxyType(
        {"listener/b": tuple((None, v) for v in added)})))
    assert "listener/b/host/b1.ex" in built[types.SCOPE]  # now listener/b is
    table_before, table_after = first[types.ROUTE]["listener/a"], built[types.ROUTE]["listener/a"]
    assert table_before.packed.value == table_after.packed.value  # the same bytes
    changes = cache.set(built, hint=builder.hint)
    assert "listener/a" not in changes[types.ROUTE].updated
    assert table_after.digest == table_before.digest
