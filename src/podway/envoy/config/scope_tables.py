"""The scoped listener's shared route tables and scopes, kept by the builder between builds.

``podway.envoy.config.scoped`` says how a listener is served as scopes: one scope per host,
naming the table of the host's bucket, which holds every virtual host of that bucket. This
keeps them up to date from the listener's table as ``routes.TableEncoder`` just encoded it:
by its edits when it was edited (a change of one host re-encodes its one table and touches its
one scope), else from all its entries, a table whose hosts and their encodings are the same
objects as before keeping its resource, a scope of the same name keeping its resource too
(the cache then sees nothing changed). Edited in place; the builder publishes copies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from envoy.config.route.v3 import route_pb2

from podway.envoy.config import scoped
from podway.envoy.config.resource import Resource
from podway.envoy.config.routes import TableEncoder
from podway.ir import Listener, VirtualHost

_Hosts = dict[int, tuple[VirtualHost, bytes]]  # virtual host by id → it and its entry


class ScopeTables:
    """The listener served as scopes (``at``, None while the fields describe none), its
    tables' hosts (``members``), its tables and its scopes by name."""

    def __init__(self) -> None:
        self.at: Listener | None = None
        self.members: dict[str, _Hosts] = {}
        self.tables: dict[str, Resource] = {}
        self.scopes: dict[str, Resource] = {}

    def forget_unless(self, chosen: Listener | None) -> bool:
        """Forget every table and scope unless ``chosen`` is the listener they are of;
        True if there were any to forget."""
        if self.at is not None and (chosen is None or chosen.name != self.at.name):
            self.at = None
        if self.at is None and (self.tables or self.members):
            self.members, self.tables, self.scopes = {}, {}, {}
            return True
        return False

    def update(self, item: Listener, previous: Listener | None,
               encoder: TableEncoder) -> set[str] | None:
        """Bring the tables and scopes up to ``item``'s table as ``encoder`` just encoded
        it: by its edits when it was edited from ``previous``'s and the tables are
        ``previous``'s (the names of the tables and scopes touched), else from all its
        entries (None: every name may differ)."""
        edits, at = encoder.edits, self.at
        self.at = None  # (until the fields are whole again)
        if at is not None and at.real_ip != item.real_ip:  # every table's tail
            at, self.members = None, {}
        if edits is not None and at is not None and at is previous:
            touched: set[str] = set()
            dirty: set[str] = set()
            gone: dict[str, Resource] = {}
            for old, new, entry in edits:
                for vhost, part in ((old, None), (new, entry)):
                    if vhost is None or vhost.hostname == "*":
                        continue
                    table = scoped.table_name(item.name, vhost.hostname)
                    name = scoped.scope_name(item.name, vhost.hostname)
                    if part is None:
                        self.members.get(table, {}).pop(id(vhost), None)
                        if name in self.scopes:
                            gone[name] = self.scopes.pop(name)
                    else:
                        self.members.setdefault(table, {})[id(vhost)] = (vhost, part)
                    touched.update((name, table))
                    dirty.add(table)
            for table in dirty:
                self._fill(item, table, encoder, gone)
            self.at = item
            return touched
        members: dict[str, _Hosts] = {}
        for vhost, entry in encoder.entries:
            if vhost.hostname != "*":  # (a catch-all serving nothing: no scope, 404)
                table = scoped.table_name(item.name, vhost.hostname)
                members.setdefault(table, {})[id(vhost)] = (vhost, entry)
        before, tables, scopes = self.members, self.tables, self.scopes
        self.members, self.tables, self.scopes = members, {}, {}
        for table, held in members.items():
            kept = tables.get(table)
            if kept is not None and before.get(table) == held:  # (the same objects)
                self.tables[table] = kept
                self._add_scopes(item, held.values(), scopes)
            else:
                self._fill(item, table, encoder, scopes)
        self.at = item
        return None

    def _fill(self, item: Listener, table: str, encoder: TableEncoder,
              kept: Mapping[str, Resource]) -> None:
        """Encode ``table`` from its hosts, sorted by hostname (the same bytes however they
        came), the first of equal names only; with no hosts it goes. Their scopes are added,
        the resource from ``kept`` where it has one of that name."""
        held = self.members.get(table)
        if not held:
            self.members.pop(table, None)
            self.tables.pop(table, None)
            return
        firsts: dict[str, bytes] = {}
        for vhost, entry in sorted(held.values(), key=lambda pair: pair[0].hostname.lower()):
            firsts.setdefault(vhost.hostname.lower(), entry)
        self.tables[table] = Resource.of_bytes(
            table, route_pb2.RouteConfiguration,
            encoder.table_bytes(table, firsts.values(), real_ip=item.real_ip))
        self._add_scopes(item, held.values(), kept)

    def _add_scopes(self, item: Listener, held: Iterable[tuple[VirtualHost, bytes]],
                    kept: Mapping[str, Resource]) -> None:
        for vhost, _ in held:
            name = scoped.scope_name(item.name, vhost.hostname)
            if name not in self.scopes:
                self.scopes[name] = kept.get(name) or Resource.of(
                    name, scoped.scope(item.name, vhost.hostname))
