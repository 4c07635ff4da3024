"""Route tables edited per change (``TableEncoder`` via ``Builder.build(ir, change)``): what
an edit keeps must not grow with the number of changes."""

from __future__ import annotations

from types import MappingProxyType

from podway.envoy_config import Builder
from podway.ir import IR, IRChange

from .helpers import http_listener, pool, route, vhost


def test_edited_tables_keep_one_encoding_per_virtual_host_however_many_changes() -> None:
    """A thousand edits of one virtual host: the encoder holds the encodings of the three
    virtual hosts the table has, not of every replaced one (nor keeps those alive), and the
    table still equals a whole build's."""
    pools = MappingProxyType({"p": pool("p", 8081)})
    hosts = [vhost(h, route(f"r-{h}", "/", "p")) for h in ("a.example", "b.example",
                                                             "c.example")]
    ir = IR(listeners=(http_listener(*hosts),), pools=pools)
    builder = Builder()
    builder.build(ir)
    for n in range(1000):
        old = hosts[1]
        hosts[1] = vhost("b.example", route(f"r-{n}", "/", "p"))
        after = IR(listeners=(http_listener(*hosts),), pools=pools)
        built = builder.build(after, IRChange(
            base=ir, vhosts=MappingProxyType({"listener/http": ((old, hosts[1]),)})))
        ir = after
    kept = builder._tables._parts["listener/http"]
    assert len(kept) == len(hosts)
    assert {part[0].name for part in kept.values()} == {h.name for h in hosts}
    assert all(any(part[0] is h for part in kept.values()) for h in hosts)
    whole = Builder().build(ir)
    assert {n: r.digest for n, r in built["type.googleapis.com/envoy.config.route.v3."
                                          "RouteConfiguration"].items()} == {
        n: r.digest for n, r in whole["type.googleapis.com/envoy.config.route.v3."
                                      "RouteConfiguration"].items()}
