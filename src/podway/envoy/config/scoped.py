"""Scoped route tables (SRDS): a large exact-hostname listener gets one scope per host, and
small route tables shared by a fixed set of hosts each.

Envoy re-applies a whole route table on every change of it: at 10,000 virtual hosts (3.5 MB)
that is 150 to 400 ms of Envoy's main thread per added route (``bench/envoy_route_apply.py``). With
scoped routes the HTTP connection manager picks a table by a key built from the request — here
the ``:authority`` (HTTP/1.1 ``Host``) up to the first ``:`` — and each table is its own RDS
resource, so one added host is one small scope and one small table (about 20x faster at 10,000).

Served as scoped routes (``pick``): the one HTTP listener (not HTTPS: its SNI tables and 421s
stay RDS) with the most hosts, at least ``SCOPED_MIN_HOSTS``, whose virtual hosts are all exact
hostnames, besides a catch-all (``*``) that serves nothing (a host without a scope gets Envoy's
own 404, as an empty catch-all answers). A wildcard hostname, or a catch-all with routes, needs
the table-level fallback that scope keys (exact strings) cannot give: such a listener keeps its
one RDS table. Only one listener per engine: Envoy shares one SRDS subscription among every
connection manager with the same config source (``ScopedRds`` hashed, name ignored), so every
scoped manager would get every scope.

The tables are shared: a host's scope names the table of its bucket (``TABLES`` buckets, by a
hash of the lower-case hostname), which holds the virtual hosts of every host in that bucket.
Each table Envoy subscribes to costs it an RDS subscription with its own init target and
stats, whatever its size: 10,000 one-host tables took 1.2-1.7 CPU-s more of Envoy's main
thread at a cold start than the same hosts in 16 to 1,024 shared tables (no difference between
those counts beyond noise; docs/performance.md, "Scopes share their route tables"). A bucket
is fixed by the hostname alone, so a host never moves between tables as others come and go;
at 10,000 hosts a table holds about ten, so a change re-sends about ten virtual hosts. The
price: a virtual host Envoy refuses holds back the other hosts of its table too (they keep
the version Envoy accepted last); the translator validates what Envoy would refuse, so this
stays the exception it is on a one-table listener, where it holds back every host.

Invariants:

* A scope's name is ``<listener>/host/<hostname>``, its key the lower-case hostname; a table's
  name is ``<listener>/hosts/<bucket>``, and it holds its hosts' virtual hosts sorted by
  hostname (the same bytes however the hosts came), the first of equal names only. A Lua
  filter first in the manager lower-cases an ``:authority`` holding upper-case letters (and
  so re-selects the scope): host matching stays case-insensitive as in a virtual host's
  domains. Such a request reaches the backend with its Host in lower case.
* The optional HTTP filters (CORS, rate limit, RBAC, buffer), switched off on other managers
  and on per route (``listeners``), are switched on in a scoped manager: Envoy creates a
  request's filters once, from the route it found first, and a request whose ``:authority`` has
  upper-case letters finds none before the Lua filter lower-cases it — its route's access rules
  would then be skipped. Enabled, they apply per route config as before (a filter with no
  per-route config does nothing), at their small cost on this one listener. Authentication
  filters (basic auth, ext_authz) would refuse every request without a per-route config, so a
  listener with a route that uses one is not served as scopes (``HostCount.guarded``).
* The listener's one-table form (``rds_form``) is built too, and its table: state-of-the-world
  streams are served that form (``podway.envoy.xds.access.TableForm``), because every SotW scope or
  listener response carries all of them (slower than one table). ``rds_form`` of a scoped
  listener is byte-equal to the listener built without scopes (tested).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import scoped_route_pb2
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from google.protobuf import wrappers_pb2
from google.protobuf.message import Message

from podway.envoy.config.access import (
    BASIC_AUTH_FILTER,
    EXT_AUTHZ_GRPC_FILTER,
    EXT_AUTHZ_HTTP_FILTER,
)
from podway.envoy.config.auth_request import AUTH_REQUEST_FILTER
from podway.envoy.config.common import WAIT_FOR_FIRST_S, ads_source, pack
from podway.envoy.config.jwt import JWT_FILTER
from podway.envoy.config.oauth2 import PREFIX as OAUTH2_PREFIX
from podway.ir import AuthRequest, BasicAuth, ExtAuth, Jwt, Listener, Oidc, VirtualHost
from podway.ir import ListenerProtocol as Protocol

#: Fewest exact hosts for which a listener's routes are served as scopes: below it one table
#: applies in a few ms, and scopes cost Envoy memory (about 20 KiB each at 10,000).
SCOPED_MIN_HOSTS = 256
#: How many route tables the hosts of a scoped listener share (see the module's docstring).
TABLES = 1024
HCM = "envoy.filters.network.http_connection_manager"
LOWER_HOST_FILTER = "podway.lower_host"
ROUTER_FILTER = "envoy.filters.http.router"
# Filters that cannot be switched on in a scoped manager (see the invariants): enabled with no
# per-route config they would refuse every request; a listener using one keeps its RDS table.
_GUARDS = (BasicAuth, ExtAuth, Jwt, AuthRequest, Oidc)
GUARD_FILTERS = frozenset({BASIC_AUTH_FILTER, EXT_AUTHZ_HTTP_FILTER, EXT_AUTHZ_GRPC_FILTER,
                           JWT_FILTER, AUTH_REQUEST_FILTER})
_LOWER_HOST = """function envoy_on_request(handle)
  local headers = handle:headers()
  local host = headers:get(":authority")
  if host ~= nil and string.find(host, "%u") then
    headers:replace(":authority", string.lower(host))
  end
end
"""


@dataclass(slots=True)
class HostCount:
    """``host_count`` of one HTTP listener, kept up to date by its virtual hosts' edits, so
    a change of one host costs one host, not a walk of them all."""

    names: Counter[str] = field(default_factory=Counter)  # lower-case exact name → how many
    wildcards: int = 0  # hostnames ``*.…``
    busy: int = 0  # catch-alls (``*``) that serve routes
    guarded: int = 0  # virtual hosts with a route that asks for credentials (``_GUARDS``)

    @classmethod
    def of(cls, listener: Listener) -> HostCount | None:
        """The count of ``listener``; None if it is not HTTP (never served as scopes)."""
        if listener.protocol is not Protocol.HTTP:
            return None
        count = cls()
        count.edit([(None, v) for v in listener.virtual_hosts])
        return count

    def edit(self, pairs: Iterable[tuple[VirtualHost | None, VirtualHost | None]]) -> None:
        """Each (old, new) virtual host: old leaves the count, new enters it."""
        for old, new in pairs:
            if old is not None:
                self._add(old, -1)
            if new is not None:
                self._add(new, 1)

    def _add(self, vhost: VirtualHost, by: int) -> None:
        name = vhost.hostname
        if any(isinstance(f, _GUARDS) for r in vhost.routes for f in r.filters):
            self.guarded += by
        if name == "*":
            self.busy += by if vhost.routes else 0
        elif name.startswith("*"):
            self.wildcards += by
        else:
            key = name.lower()
            left = self.names[key] + by
            if left:
                self.names[key] = left
            else:
                del self.names[key]

    @property
    def count(self) -> int | None:
        """As ``host_count``."""
        return None if self.wildcards or self.busy or self.guarded else len(self.names)


def host_count(listener: Listener) -> int | None:
    """How many exact hostnames ``listener`` serves if it can be served as scopes (HTTP, exact
    hostnames only, a catch-all only if it serves nothing), else None. (A duplicate counts
    once, as in the table: the first wins.)"""
    count = HostCount.of(listener)
    return count.count if count is not None else None


def pick(listeners: Iterable[Listener], min_hosts: int = SCOPED_MIN_HOSTS, *,
         host_count: Callable[[Listener], int | None] = host_count) -> Listener | None:
    """The listener served as scopes: the eligible one with the most hosts (at least
    ``min_hosts``; the first on a tie), or None. (``host_count``: a memo may stand in.)"""
    best: Listener | None = None
    most = min_hosts - 1
    for listener in listeners:
        count = host_count(listener)
        if count is not None and count > most:
            best, most = listener, count
    return best


def scope_name(listener: str, hostname: str) -> str:
    """The name of ``hostname``'s scope."""
    return f"{listener}/host/{hostname.lower()}"


def bucket(hostname: str) -> int:
    """The bucket of ``hostname`` (case-insensitive): fixed by the name alone."""
    return zlib.crc32(hostname.lower().encode()) % TABLES


def table_name(listener: str, hostname: str) -> str:
    """The name of the route table that holds ``hostname``'s virtual host."""
    return f"{listener}/hosts/{bucket(hostname)}"


def table_of(scope: str) -> str:
    """The table named by the scope called ``scope`` (``scope_name``)."""
    listener, _, hostname = scope.rpartition("/host/")
    return table_name(listener, hostname)


def bucket_of(listener: str, table: str) -> int | None:
    """The bucket of ``listener``'s table called ``table``; None if it is not one."""
    prefix = listener + "/hosts/"
    number = table[len(prefix):] if table.startswith(prefix) else ""
    return int(number) if number.isdigit() and int(number) < TABLES else None


def is_table(name: str) -> bool:
    """``name`` is shaped as a scopes' shared table (of some listener)."""
    listener, found, _ = name.rpartition("/hosts/")
    return bool(found) and bucket_of(listener, name) is not None


def scope(listener: str, hostname: str) -> scoped_route_pb2.ScopedRouteConfiguration:
    out = scoped_route_pb2.ScopedRouteConfiguration(
        name=scope_name(listener, hostname),
        route_configuration_name=table_name(listener, hostname))
    out.key.fragments.add(string_key=hostname.lower())
    return out


def use_scopes(manager: hcm.HttpConnectionManager) -> None:
    """``manager`` (with routes from RDS) takes them from scopes keyed by the host instead."""
    name = manager.rds.route_config_name
    manager.ClearField("rds")
    scoped = manager.scoped_routes
    scoped.name = name
    extractor = scoped.scope_key_builder.fragments.add().header_value_extractor
    extractor.name = ":authority"
    extractor.element_separator = ":"  # the port, if any, is not part of the key
    extractor.index = 0
    # Envoy waits for the scopes and their tables (``common.WAIT_FOR_FIRST_S``), as for the
    # clusters and listeners: with its 15 s default each of thousands of tables timed out on
    # its own (a warning each) when Envoy was busy for longer, and a timed-out table left its
    # host without routes until it came.
    scoped.rds_config_source.CopyFrom(ads_source(initial_fetch_timeout_s=WAIT_FOR_FIRST_S))
    scoped.scoped_rds.scoped_rds_config_source.CopyFrom(
        ads_source(initial_fetch_timeout_s=WAIT_FOR_FIRST_S))
    for item in manager.http_filters:  # see the module's invariants: access must not depend
        # on the case of the Host; an authentication filter stays off (with no per-route
        # config it would refuse everything; a listener that uses one is never scoped)
        item.disabled = item.name in GUARD_FILTERS or item.name.startswith(OAUTH2_PREFIX)
    manager.http_filters.insert(0, hcm.HttpFilter(name=LOWER_HOST_FILTER, typed_config=pack(
        lua_pb2.Lua(default_source_code={"inline_string": _LOWER_HOST},
                    clear_route_cache=wrappers_pb2.BoolValue(value=True)))))


def has_scopes(message: Message) -> bool:
    """``message`` is a listener with a connection manager served as scopes."""
    if not isinstance(message, listener_pb2.Listener):
        return False
    chains = [*message.filter_chains]
    if message.HasField("default_filter_chain"):
        chains.append(message.default_filter_chain)
    for chain in chains:
        for item in chain.filters:
            if item.name == HCM and item.typed_config.Is(
                    hcm.HttpConnectionManager.DESCRIPTOR):
                manager = hcm.HttpConnectionManager()
                item.typed_config.Unpack(manager)
                if manager.HasField("scoped_routes"):
                    return True
    return False


def rds_form(listener: listener_pb2.Listener) -> listener_pb2.Listener | None:
    """``listener`` with each scoped manager back on its one RDS table (named by the scopes'
    name); None if it has no scoped manager."""
    out = listener_pb2.Listener()
    out.CopyFrom(listener)
    chains = [*out.filter_chains]
    if out.HasField("default_filter_chain"):
        chains.append(out.default_filter_chain)
    changed = False
    for chain in chains:
        for item in chain.filters:
            if item.name != HCM:
                continue
            manager = hcm.HttpConnectionManager()
            item.typed_config.Unpack(manager)
            if not manager.HasField("scoped_routes"):
                continue
            name = manager.scoped_routes.name
            manager.ClearField("scoped_routes")
            manager.rds.route_config_name = name
            manager.rds.config_source.CopyFrom(ads_source())
            kept = [f for f in manager.http_filters if f.name != LOWER_HOST_FILTER]
            for item_filter in kept:  # every filter but the terminal router is optional
                item_filter.disabled = item_filter.name != ROUTER_FILTER
            del manager.http_filters[:]
            manager.http_filters.extend(kept)
            item.typed_config.CopyFrom(pack(manager))
            changed = True
    return out if changed else None
