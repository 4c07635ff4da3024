"""Envoy's share of a route change: one added virtual host, cache set → ACK → first 200.

Drives real Envoys (``find_envoy()``) through Podway's own cache and ADS server, with N virtual
hosts shaped like ``bench/convergence.py``'s (HTTPRoute ``r<i>.bench.test`` → Service ``svc-<i>``,
one rule, one backend; translated and built by Podway) plus the listener's catch-all, and N
clusters and load assignments at one loopback echo (a child process). The clusters of the hosts
added later exist from the start, so a try changes routes only: what is timed is Podway pushing
the route update and Envoy applying it, nothing of the translation. Pools' active health checks
are left out but in ``rds-delta-hc``: at 10,000 pools they are 2,000 probes a second per Envoy
(5 s interval), run on Envoy's main thread, the one that applies xDS too.

Every variant has an Envoy of its own, all running at once; the tries take turns (the order
rotates), so a busy spell of the shared machine lands on every variant alike. Compare variants
within one run, not across runs. Per variant, p50/p99 over ``--tries`` added hosts of: cache set
→ response written to the gRPC stream (Podway's part), written → ACK (transport, Envoy decoding,
validating, hashing and applying), ACK → first 200 (the worker picking the new table up), and
cache set → 200.

* ``rds-delta`` / ``rds-sotw``: today — the whole table (N+1 virtual hosts) in one RDS
  resource, incremental or state-of-the-world ADS.
* ``rds-same``: the very same table bytes sent again under a new version. Envoy decodes,
  validates and hashes it, finds the hash unchanged and stops before building a route config:
  this is the decode + validate + hash part; ``rds-delta`` minus it is building the new
  ConfigImpl (every virtual host's routes, matchers, retry policies) and handing it over.
* ``rds-no-retry`` / ``rds-no-predicate`` / ``rds-no-upgrade`` / ``rds-slim``: today's table
  without each host's retry policy, without only its retry host predicate (``previous_hosts``,
  a typed extension config), without each route's websocket upgrade entry, without both retry
  policy and upgrade entry; ``rds-slim-same`` re-sends the slim table's bytes. These change
  what Podway serves (they are not proposals): they show what each part costs Envoy.
* ``rds-delta-hc`` / ``srds-hc``: ``rds-delta`` / ``srds`` with the pools' active health
  checks, as Podway serves them.
* ``rds-unknown-walk``: ``rds-delta`` with Envoy started without
  ``--ignore-unknown-dynamic-fields`` (as before Podway passed it): Envoy then walks every
  update once more, field by field, to warn about unknown or deprecated fields.
* ``vhds``: the table carries only the catch-all and ``vhds`` (config source: ADS, which Envoy
  allows for VHDS only when the ADS stream is delta); every other virtual host is an
  ``envoy.config.route.v3.VirtualHost`` resource (``<table>/<hostname>``: Envoy subscribes to
  the table's name and matches by namespace), pushed without being asked for, so one added
  host is one small resource. Podway does not serve VHDS: the server side is a bench shim
  (``VhdsStream``, and ``types.PUSH_ORDER`` extended for the run).
* ``srds``: scoped routes. The listener's connection manager builds a scope key
  from the request's ``:authority`` (HTTP/1.1 ``Host`` too) up to the first ``:``; each
  hostname is one ``ScopedRouteConfiguration`` (key: the hostname) naming the route table
  its bucket's hosts share (``podway.envoy.config.scoped``); no catch-all (a host without a
  scope gets Envoy's own 404).
  Listener, scope and table as Podway builds them (``podway.envoy.config.scoped``), served by
  Podway's delta stream. (SotW engines get the one table from Podway: scopes over SotW, every
  response carrying all of them, measured 736 / 981 ms p50 / p99 at 10,000.) One added
  host is one small scope and its small table right behind it: "written" is the scope's
  response, "→ ACK" runs to the new table's ACK. The scope and table resources are built
  once per host, as Podway's builder memoises the unchanged.

Also printed per variant: seconds from Envoy's start to the first 200, Envoy's resident memory
then, and the status of the first host with a port (``host:8080``), in upper case, and of an
unknown host.

    PYTHONPATH=src .venv/bin/python bench/envoy_route_apply.py [--sizes 1000,10000]
        [--tries 20] [--variants rds-delta,srds,vhds,...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)

sys.path.insert(0, str(Path(__file__).parent))
import speedref
from translate import convergence_cluster
from xds_push import free_port, pct

from podway.envoy import types
from podway.envoy.config import Resource, Resources, build, scoped
from podway.envoy.config.common import pack
from podway.envoy.config.routes import varint
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.engine.state import StateDir
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream, _DeltaType
from podway.envoy.xds.protocol import Ack, Event, Nack
from podway.envoy.xds.server import AdsServicer, XdsServer
from podway.model import Snapshot
from podway.translate import TranslateOptions, translate

VHOST = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
SCOPE = types.SCOPE


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    shape: str = "today"  # see SHAPES
    delta: bool = True
    same: bool = False  # re-send the unchanged table's bytes under a new version
    vhds: bool = False
    srds: bool = False  # one scope (and route table) per hostname
    health_checks: bool = False  # keep the pools' active health checks
    without_args: tuple[str, ...] = ()  # flags of Podway's Envoy command line left out


#: What each virtual host keeps of today's encoding.
#: (A retry host predicate named without its typed config is refused by Envoy 1.40: "Didn't
#: find a registered implementation for 'envoy.retry_host_predicates.previous_hosts' with type
#: URL: ''", so the Any cannot be dropped.)
SHAPES = ("today", "no-retry", "no-predicate", "no-upgrade", "slim")
VARIANTS = {v.name: v for v in (
    Variant("rds-delta"), Variant("rds-sotw", delta=False), Variant("rds-same", same=True),
    Variant("rds-no-retry", shape="no-retry"),
    Variant("rds-no-predicate", shape="no-predicate"),
    Variant("rds-no-upgrade", shape="no-upgrade"),
    Variant("rds-slim", shape="slim"), Variant("rds-slim-same", shape="slim", same=True),
    Variant("vhds", vhds=True), Variant("srds", srds=True),
    Variant("srds-hc", srds=True, health_checks=True), Variant("rds-delta-hc", health_checks=True),
    Variant("rds-unknown-walk", without_args=("--ignore-unknown-dynamic-fields",)))}


# ---- the configuration: Podway's translation of the convergence bench's objects ----------
def snapshot(count: int, echo_port: int, gateway_port: int) -> Snapshot:
    """The convergence bench's world (``bench/translate.py``), every endpoint the one echo."""
    return convergence_cluster(count, gateway_port=gateway_port, target_port=echo_port,
                               address="127.0.0.1")[1]


class Config:
    """The built resources of ``count + tries`` routes, and the route table (or VHDS set)
    with the first ``count + k`` of them."""

    def __init__(self, count: int, tries: int, echo_port: int, gateway_port: int) -> None:
        # (each variant moves the listener to a port of its own)
        # (the one table: the srds variants build their scopes from it as Podway does)
        built = build(translate(snapshot(count + tries, echo_port, gateway_port),
                                TranslateOptions(address="127.0.0.1")).ir,
                      scoped_min_hosts=sys.maxsize)
        self.count = count
        self.base = dict(built)
        self.checked = built[types.CLUSTER]
        self.unchecked = MappingProxyType({
            name: _unchecked(resource) for name, resource in self.checked.items()})
        [(self.table_name, table)] = built[types.ROUTE].items()
        config = table.message
        assert isinstance(config, route_pb2.RouteConfiguration)
        hosts = list(config.virtual_hosts)
        self.catch_all = next(v for v in hosts if v.domains == ["*"])
        self.hosts = [v for v in hosts if v.domains != ["*"]]
        assert len(self.hosts) == count + tries
        self.head = route_pb2.RouteConfiguration()
        self.head.CopyFrom(config)
        del self.head.virtual_hosts[:]
        self._encoded: dict[tuple[int, str], bytes] = {}
        self._scoped: dict[int, Resource] = {}  # scopes by host
        self._shared: dict[tuple[str, tuple[int, ...]], Resource] = {}  # tables by their hosts

    def _vhost(self, i: int, shape: str) -> bytes:
        key = (i, shape)
        found = self._encoded.get(key)
        if found is None:
            vhost = _shaped(self.hosts[i] if i >= 0 else self.catch_all, shape)
            data = vhost.SerializeToString(deterministic=True)
            found = self._encoded[key] = b"\x12" + varint(len(data)) + data
        return found

    def table(self, hosts: int, *, shape: str = "today", vhds: bool = False) -> Resource:
        """The route table with the first ``hosts`` virtual hosts (none with ``vhds``) and
        the catch-all, encoded the way ``TableEncoder`` does (parts joined)."""
        head = route_pb2.RouteConfiguration()
        head.CopyFrom(self.head)
        if vhds:
            head.vhds.config_source.ads.SetInParent()
            head.vhds.config_source.resource_api_version = 2  # V3
        whole = head.SerializeToString(deterministic=True)
        name_only = route_pb2.RouteConfiguration(name=head.name).SerializeToString(
            deterministic=True)
        parts = [name_only]
        if not vhds:
            parts.extend(self._vhost(i, shape) for i in range(hosts))
        parts.append(self._vhost(-1, shape))
        parts.append(whole[len(name_only):])
        return Resource.of_bytes(self.table_name, route_pb2.RouteConfiguration, b"".join(parts))

    def vhosts(self, hosts: int) -> dict[str, Resource]:
        out = {}
        for vhost in self.hosts[:hosts]:
            named = rc.VirtualHost()
            named.CopyFrom(vhost)
            named.name = f"{self.table_name}/{vhost.domains[0]}"
            out[named.name] = Resource.of(named.name, named)
        return out

    def scopes(self, hosts: int) -> tuple[dict[str, Resource], dict[str, Resource]]:
        """One scope per hostname (key: the hostname) naming its bucket's shared route table
        (``<table>/hosts/<bucket>``, the bucket's virtual hosts sorted by hostname), as
        Podway builds them; no catch-all (SRDS has no fallback scope: a host without a scope
        gets Envoy's own 404)."""
        scopes: dict[str, Resource] = {}
        members: dict[str, list[int]] = {}
        for i in range(hosts):
            host = self.host(i)
            found = self._scoped.get(i)
            if found is None:  # built once, like Podway's builder memoises what is unchanged
                name = scoped.scope_name(self.table_name, host)
                found = self._scoped[i] = Resource.of(name, scoped.scope(self.table_name, host))
            scopes[found.name] = found
            members.setdefault(scoped.table_name(self.table_name, host), []).append(i)
        tables: dict[str, Resource] = {}
        for name, held in members.items():
            key = (name, tuple(held))
            table = self._shared.get(key)
            if table is None:
                config = route_pb2.RouteConfiguration()
                config.CopyFrom(self.head)
                config.name = name
                config.virtual_hosts.extend(sorted((self.hosts[i] for i in held),
                                                   key=lambda v: v.domains[0]))
                table = self._shared[key] = Resource.of(name, config)
            tables[name] = table
        return scopes, tables

    def resources(self, hosts: int, variant: Variant, *, version: int = 0) -> Resources:
        out: dict[str, Any] = {t: self.base.get(t, MappingProxyType({}))
                               for t in types.PUSH_ORDER}
        out[types.CLUSTER] = self.checked if variant.health_checks else self.unchecked
        if variant.srds:
            scopes, tables = self.scopes(hosts)
            out[SCOPE] = MappingProxyType(scopes)
            out[types.ROUTE] = MappingProxyType(tables)
            return out
        if variant.vhds:
            out[types.ROUTE] = MappingProxyType({self.table_name: self.table(0, vhds=True)})
            out[VHOST] = MappingProxyType(self.vhosts(hosts))
            return out
        table = self.table(self.count if variant.same else hosts, shape=variant.shape)
        if variant.same and version:  # the same bytes under a new version: sent again
            table = Resource(name=table.name, digest=f"{table.digest}-{version}",
                             kind=table.kind, held=table.packed)
        out[types.ROUTE] = MappingProxyType({self.table_name: table})
        return out

    def host(self, i: int) -> str:
        return str(self.hosts[i].domains[0])


def scoped_listener(listener: listener_pb2.Listener) -> None:
    """Each HTTP connection manager of ``listener`` takes its route table from scopes, as
    Podway's builder makes it (``podway.envoy.config.scoped.use_scopes``)."""
    chains = [*listener.filter_chains]
    if listener.HasField("default_filter_chain"):
        chains.append(listener.default_filter_chain)
    for chain in chains:
        for item in chain.filters:
            if item.name != scoped.HCM:
                continue
            manager = hcm.HttpConnectionManager()
            item.typed_config.Unpack(manager)
            scoped.use_scopes(manager)
            item.typed_config.CopyFrom(pack(manager))


def _unchecked(resource: Resource) -> Resource:
    cluster = cluster_pb2.Cluster()
    cluster.CopyFrom(resource.message)
    cluster.ClearField("health_checks")
    return Resource.of(resource.name, cluster)


def _shaped(vhost: rc.VirtualHost, shape: str) -> rc.VirtualHost:
    """``vhost`` without what ``shape`` drops (see ``SHAPES``)."""
    out = rc.VirtualHost()
    out.CopyFrom(vhost)
    if shape in ("no-retry", "slim"):
        out.ClearField("retry_policy")
    if shape == "no-predicate":  # retries kept, without "another member than last time"
        out.retry_policy.ClearField("retry_host_predicate")
        out.retry_policy.ClearField("host_selection_retry_max_attempts")
    if shape in ("no-upgrade", "slim"):
        for route in out.routes:
            if route.HasField("route"):
                route.route.ClearField("upgrade_configs")
    return out


# ---- the server: Podway's, timing its writes; VHDS through a shim ----------------------
class VhdsStream(DeltaStream):
    """A delta stream that also serves VirtualHost resources: Envoy subscribes to the
    table's name (namespace matching); every virtual host of the cache is sent to it."""

    def on_request(self, request: Any) -> Any:
        if request.type_url == VHOST and VHOST not in self._types:
            self._types[VHOST] = _DeltaType(wildcard=True)
        return super().on_request(request)


class _TimedContext:
    """A stream's gRPC context that notes when each response's write completed."""

    def __init__(self, context: Any, written: dict[str, float]) -> None:
        self._context = context
        self._written = written

    async def write(self, response: Any) -> None:
        await self._context.write(response)
        self._written[response.type_url] = time.perf_counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class BenchServicer(AdsServicer):
    """Podway's ADS servicer; ``written`` has, per type, when its last response was
    written to the gRPC stream; ``shim`` serves delta streams through ``VhdsStream``."""

    def __init__(self, cache: Cache, *, on_event: Any, shim: bool) -> None:
        super().__init__(cache, on_event=on_event)
        self.shim = shim
        self.written: dict[str, float] = {}

    async def DeltaAggregatedResources(self, requests: AsyncIterator[Any],
                                       context: Any) -> None:
        if not self.shim:
            return await super().DeltaAggregatedResources(requests, context)
        view, requests, group = await self._view(context, requests)
        if view is not None:
            await self._serve(VhdsStream(view, memory=self.refusals), requests, context,
                              "delta", group)
        return None

    async def _serve(self, stream: Any, requests: AsyncIterator[Any], context: Any,
                     mode: str, engine_group: str = "") -> None:
        await super()._serve(stream, requests, _TimedContext(context, self.written), mode,
                             engine_group)


# ---- measuring ------------------------------------------------------------------------
class Acks:
    def __init__(self) -> None:
        self.waiters: list[tuple[str, str, asyncio.Future[float]]] = []
        self.nacks: list[Nack] = []
        self.refused = asyncio.Event()

    def __call__(self, event: Event) -> None:
        if isinstance(event, Nack):
            self.nacks.append(event)
            self.refused.set()
            print(f"  NACK {event.type_url.rsplit('.', 1)[-1]}: {event.message[:300]}",
                  flush=True)
        if isinstance(event, Ack):
            now = time.perf_counter()
            for waiter in list(self.waiters):
                type_url, name, future = waiter
                if (type_url == event.type_url and (not name or name in event.resources)
                        and not future.done()):
                    future.set_result(now)
                    self.waiters.remove(waiter)

    def next(self, type_url: str, name: str = "") -> asyncio.Future[float]:
        """The next ACK of ``type_url`` (that carried ``name``, if given)."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters.append((type_url, name, future))
        return future


SLOW: list[float] = []  # requests that took over SLOW_S (they count in the figures)
SLOW_S = 0.5


async def status_of(port: int, host: str) -> int:
    began = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        line = await reader.readline()
        return int(line.split()[1])
    finally:
        writer.close()
        if time.perf_counter() - began > SLOW_S:
            SLOW.append(time.perf_counter() - began)


async def until_status(port: int, host: str, want: int, limit_s: float) -> float:
    async with asyncio.timeout(limit_s):
        while True:
            with contextlib.suppress(OSError, IndexError, ValueError):
                if await status_of(port, host) == want:
                    return time.perf_counter()
            await asyncio.sleep(0.0005)


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, .5) * 1e3:6.1f}  p99 {pct(values, .99) * 1e3:6.1f} ms"


class _Engine(Engine):
    """Podway's engine supervisor, with some of Envoy's command-line flags left out."""

    def __init__(self, without: tuple[str, ...], opts: EngineOptions) -> None:
        super().__init__(opts)
        self.without = without

    def _args(self, state: StateDir) -> list[str]:
        return [a for a in super()._args(state) if a not in self.without]


class Bed:
    """One variant: its own cache, ADS server, Envoy and listener port, and its figures."""

    def __init__(self, config: Config, variant: Variant) -> None:
        self.config, self.variant = config, variant
        self.port = 0
        self.listeners: Mapping[str, Resource] = MappingProxyType({})
        self.cache = Cache()
        self.acks = Acks()
        self.server = XdsServer(self.cache, "127.0.0.1:0", unauthenticated=True,
                                on_event=self.acks)
        self.servicer = BenchServicer(self.cache, on_event=self.acks,
                                      shim=variant.vhds)
        self.server.servicer = self.servicer
        self.task: asyncio.Task[None] | None = None
        self.first = 0.0
        self.written: list[float] = []  # cache set → response written (Podway's part)
        self.acked: list[float] = []  # written → ACK (transport and Envoy)
        self.served: list[float] = []  # ACK → first 200
        self.target = VHOST if variant.vhds else types.ROUTE

    def resources(self, hosts: int, version: int = 0) -> Resources:
        out = dict(self.config.resources(hosts, self.variant, version=version))
        out[types.LISTENER] = self.listeners
        return out

    async def start(self) -> None:
        await self.server.start()
        # Its own listener port, taken only now (a port picked earlier may have gone to
        # another variant's xDS server meanwhile).
        self.port = free_port()
        [(name, listener)] = self.config.base[types.LISTENER].items()
        moved = listener_pb2.Listener()
        moved.CopyFrom(listener.message)
        moved.address.socket_address.port_value = self.port
        if self.variant.srds:
            scoped_listener(moved)
        self.listeners = MappingProxyType({name: Resource.of(name, moved)})
        self.cache.set(self.resources(self.config.count))
        engine = _Engine(self.variant.without_args, EngineOptions(
            envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(BootstrapOptions(
                node_id=f"bench-{self.variant.name}", xds=self.server.target,
                delta=self.variant.delta))))
        self.engine = engine
        self.task = asyncio.create_task(engine.run())
        began = time.perf_counter()
        ready = asyncio.ensure_future(until_status(self.port, self.config.host(0), 200, 600))
        refused = asyncio.ensure_future(self.acks.refused.wait())
        await asyncio.wait((ready, refused), return_when=asyncio.FIRST_COMPLETED)
        refused.cancel()
        if not ready.done():
            ready.cancel()
            raise RuntimeError(f"{self.variant.name}: Envoy refused the initial configuration: "
                               f"{self.acks.nacks[0].message}")
        self.first = ready.result() - began
        host = self.config.host(0)
        self.probes = {what: await status_of(self.port, name) for what, name in (
            ("host:port", f"{host}:8080"), ("HOST", host.upper()),
            ("unknown", "nowhere.bench.test"))}

    def rss_mib(self) -> float:
        """The Envoy's resident memory, MiB (0 when unknown)."""
        with contextlib.suppress(OSError, TypeError):
            for line in Path(f"/proc/{self.engine.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    async def one(self, k: int) -> None:
        """Add the k-th host (1-based) and time it."""
        host = self.config.host(self.config.count + k - 1)
        assert await status_of(self.port, host) == 404
        resources = self.resources(self.config.count + k, version=k)
        # srds: the new scope goes out first; Envoy then asks for its table: the ACK timed
        # is the table's, "written" is the scope's.
        ack = self.acks.next(self.target, scoped.table_name(self.config.table_name, host)
                             if self.variant.srds else "")
        first = SCOPE if self.variant.srds else self.target
        t0 = time.perf_counter()
        self.cache.set(resources)
        t_ack = await asyncio.wait_for(ack, 120)
        self.written.append(self.servicer.written[first] - t0)
        self.acked.append(t_ack - self.servicer.written[first])
        if not self.variant.same:
            self.served.append(await until_status(self.port, host, 200, 120) - t_ack)

    def report(self, ref: speedref.Reference) -> None:
        name = self.variant.name
        if self.acks.nacks:
            print(f"  {name}: {len(self.acks.nacks)} NACKs, figures left out", flush=True)
            return
        tables = self.resources(self.config.count)[types.ROUTE]
        table = tables.get(self.config.table_name) or tables[
            scoped.table_name(self.config.table_name, self.config.host(0))]
        total = [w + a + s for w, a, s in zip(self.written, self.acked, self.served,
                                               strict=True)] if self.served else []
        print(f"  {name:<14} table {len(table.packed.value) / 1e6:5.2f} MB | written "
              f"{ms(self.written)} | → ACK {ms(self.acked)} ({ref.ratio(pct(self.acked, .5))})"
              + (f" | ACK → 200 {ms(self.served)} | set → 200 {ms(total)}" if total else ""),
              flush=True)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.server.stop(0)


async def bench_size(count: int, tries: int, variants: list[Variant], echo_port: int,
                     ref: speedref.Reference) -> None:
    """Every variant's Envoy runs at once and the tries take turns (variant order rotates),
    so a busy spell of the shared machine lands on every variant alike."""
    config = Config(count, tries, echo_port, free_port())
    print(f"== {count} virtual hosts (+ catch-all), {tries} added one at a time; p50/p99",
          flush=True)
    beds = [Bed(config, v) for v in variants]
    try:
        for bed in beds:  # one at a time: 10,000 clusters each
            await bed.start()
        print("  first 200 after start, Envoy RSS: " + ", ".join(
            f"{b.variant.name} {b.first:.1f} s {b.rss_mib():.0f} MiB" for b in beds),
            flush=True)
        print("  status of host:port / upper-case host / unknown host: " + ", ".join(
            f"{b.variant.name} " + "/".join(str(s) for s in b.probes.values()) for b in beds),
            flush=True)
        for k in range(1, tries + 1):
            turn = beds[k % len(beds):] + beds[:k % len(beds)]
            for bed in turn:
                await bed.one(k)
        for bed in beds:
            bed.report(ref)
        if SLOW:
            print(f"  requests slower than {SLOW_S} s: "
                  + ", ".join(f"{s:.1f} s" for s in SLOW), flush=True)
            SLOW.clear()
    finally:
        for bed in beds:
            await bed.stop()


async def main_async(sizes: list[int], tries: int, variants: list[Variant]) -> None:
    ref = speedref.measure()
    print(ref.describe(), flush=True)
    echo_port = free_port()
    # The backend in a process of its own: with health checks, every cluster of every Envoy
    # probes it (10,000 clusters: 2,000 probes a second per Envoy), which must not slow this
    # process's xDS server or its timing.
    echo = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "echo", "--port", str(echo_port), "--name", "e",
        "--log-level", "warning")
    push_order = types.PUSH_ORDER
    # The VHDS shim: caches and streams also carry virtual hosts (an empty type for the rest).
    types.PUSH_ORDER = (*push_order, VHOST)  # type: ignore[misc,assignment]
    try:
        for count in sizes:
            await bench_size(count, tries, variants, echo_port, ref)
    finally:
        types.PUSH_ORDER = push_order  # type: ignore[misc]
        echo.terminate()
        await echo.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("podway.envoy.xds.server").setLevel(logging.ERROR)  # "not authenticated"
    asyncio.run(main_async([int(s) for s in args.sizes.split(",")], args.tries,
                           [VARIANTS[n] for n in names]))


if __name__ == "__main__":
    main()
