"""The engine's side of member health: what its Envoy thinks of each member, sent to the controller.

``podway engine`` runs a ``Reporter`` beside Envoy. Every ``interval_s`` it reads Envoy's admin
``/clusters`` once (the health flags of every host of every pool) and reduces each host to
healthy / pending / unhealthy (``classify``). It sends that view to **every** controller replica
(``podway.engines.report_targets``: each ``--xds`` address, every address a DNS name resolves
to, names looked up again every ``resolve_s``), one long-lived gRPC stream per replica
(``podway.engines.member_health``), with the TLS settings and client certificate of xDS. Only the
leading replica writes the readiness gate, and the engine's Envoy may hold its xDS stream to any
replica: reporting to all of them is how the leader hears this engine wherever its xDS goes.

Invariants:

* A stream starts with the whole view (``full``, naming the engine's group, if any: the
  controller counts the engine only for the pools its group is sent), so a controller that
  restarted, or a stream that broke, never combines news with a view it did not see; later
  messages carry changes only. A report over ``MAX_MESSAGE_BYTES`` goes in parts (gRPC refuses
  messages over 4 MiB: a view of ~50,000 hosts sent whole was refused on every retry).
  Nothing is sent before Envoy's admin first answers: "never reported" stays distinguishable
  from "reported no hosts".
* The Kubernetes readiness Envoy was told (EDS health status) is ignored: the gate itself moves
  it, so counting it would lock a gated pod out for good. Health is what Envoy measured.
* Envoy's admin not answering keeps the last view (Envoy restarting is seen as its hosts
  turning pending once it answers again).
* Replicas are independent: each stream has its own task, its own backoff and its own place in
  the view's history (one read of Envoy serves them all); a replica that is down, refuses or
  hangs is retried with backoff and never delays the others. A replica gone from the DNS answer
  has its stream closed; a new one gets a stream that starts with the full view.
* A stream to a replica that stops answering (paused, partitioned) is found dead by gRPC
  keepalive pings (every 30 s, 5 s to answer; the xDS server allows them) and opened again.
  A stream that cannot send fast enough skips to the newest view: no backlog builds up.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import grpc

from podway.base.backoff import Backoff
from podway.engines.member_health import (
    PATH,
    Health,
    HostKey,
    HostState,
    Message,
    Refusal,
    diff,
    encode_parts,
)
from podway.engines.report_targets import Names, Resolver, Target, resolve, targets
from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import xds_addresses

log = logging.getLogger(__name__)

View = Mapping[HostKey, HostState]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportOptions:
    """Where and how often to report; TLS settings as the engine's xDS connection."""

    node_id: str
    engine_group: str = ""  # --engine-group: named in each stream's first (full) message
    xds: str | tuple[str, ...]  # the --xds addresses ("host:port" or "unix:/path"): every
    # replica they name (and every address a name resolves to) gets the reports
    ca_pem: str | None = None  # set: TLS, verifying the controller's certificate
    sni: str = ""  # name to verify (default: the DNS name of each address; an IP: itself)
    client_cert_pem: str | None = None
    client_key_pem: str | None = None
    interval_s: float = 2.0  # between two reads of Envoy's admin; each costs one /clusters dump
    resolve_s: float = 5.0  # between two lookups of the DNS names (Envoy's own DNS refresh)
    keepalive_s: float = 30.0  # ping a replica this often (as Envoy pings its xDS server) ...
    keepalive_timeout_s: float = 5.0  # ... and give the stream up when a ping is not answered
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=10.0))


# Envoy's text ``/clusters`` flag names → the JSON names ``classify`` reads.
_FLAGS = {"failed_active_hc": "failed_active_health_check",
          "failed_outlier_check": "failed_outlier_check",
          "degraded_active_hc": "failed_active_degraded_check",
          "pending_active_hc": "pending_active_hc",
          "excluded_via_immediate_hc_fail": "excluded_via_immediate_hc_fail",
          "active_hc_timeout": "active_hc_timeout"}
_MARK = "::health_flags::"


def classify(flags: Mapping[str, Any]) -> HostState:
    """One host's health flags (named as in the JSON ``/clusters``' ``health_status``) →
    its health. EDS status, the Kubernetes readiness Podway itself sent, is ignored: see the
    module docstring."""
    if flags.get("pending_active_hc"):
        return HostState(Health.PENDING, "waiting for its first health check")
    if flags.get("failed_active_health_check"):
        why = " (timeout)" if flags.get("active_hc_timeout") else ""
        return HostState(Health.UNHEALTHY, f"failed active health check{why}")
    if flags.get("failed_outlier_check"):
        return HostState(Health.UNHEALTHY, "ejected by outlier detection")
    if flags.get("excluded_via_immediate_hc_fail"):
        return HostState(Health.UNHEALTHY, "answered an immediate health check failure")
    return HostState(Health.HEALTHY)


def parse(body: str) -> View:
    """Envoy's text ``/clusters`` → (pool, "address:port") → health; other lines are skipped.

    Only the ``<cluster>::<host>::health_flags::<flags>`` lines matter (``healthy``, or flags
    like ``/failed_active_hc/pending_active_hc``), so they are found by substring search
    instead of parsing the whole answer: ``json.loads`` of the JSON form costs ~4x more per
    look at 4,000 pools (``bench/health_report.py``). An IPv6 host
    ``[a::b]:port`` becomes ``a::b:port``, as the controller names members.
    """
    out: dict[HostKey, HostState] = {}
    at = body.find(_MARK)
    while at >= 0:
        line_start = body.rfind("\n", 0, at) + 1
        line_end = body.find("\n", at)
        line_end = len(body) if line_end < 0 else line_end
        cluster, sep, host = body[line_start:at].partition("::")
        if sep and host:
            if host.startswith("["):
                address, _, port = host[1:].partition("]:")
                host = f"{address}:{port}"
            names = body[at + len(_MARK):line_end].strip().split("/")
            out[(cluster, host)] = classify({_FLAGS[n]: True for n in names if n in _FLAGS})
        at = body.find(_MARK, line_end)
    return MappingProxyType(out)


async def read_view(address: str, *, limit_s: float = 5.0) -> View | None:
    """The engine's view now; None when its admin does not answer well."""
    try:
        status, body = await admin.request(address, "/clusters", limit_s=limit_s)
    except (OSError, TimeoutError):
        return None
    if status != 200:
        return None
    return await asyncio.to_thread(parse, body)  # megabytes with thousands of pools


class Reporter:
    """Streams this engine's member health to every controller replica until cancelled."""

    def __init__(self, opts: ReportOptions, admin_address: Callable[[], str | None], *,
                 resolver: Resolver = resolve,
                 refused: Callable[[], tuple[Refusal, ...]] = tuple) -> None:
        self.opts = opts
        self.admin_address = admin_address
        # Listeners Envoy accepted and could not serve (``Engine.listener_failures``): sent
        # with the view, so the controller records them as this engine's rejections.
        self.refused = refused
        self._refused: tuple[Refusal, ...] = ()
        self.addresses = xds_addresses(opts.xds)
        self.names = Names(self.addresses, resolver=resolver)
        self.sent = 0  # messages sent (all streams)
        self.streams: dict[Target, asyncio.Task[None]] = {}  # one per replica now
        self._view: View | None = None  # Envoy's view as last read; None: not yet
        self._version = 0  # counts changes of ``_view``
        self._changed = asyncio.Condition()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._read_views(), name="engine-health-view")
            try:
                while True:
                    resolved = await self.names.refresh() if self.names.names else {}
                    self._follow(group, targets(self.addresses, resolved, sni=self.opts.sni))
                    if not self.names.names:
                        await asyncio.Event().wait()  # nothing to look up again
                    await asyncio.sleep(self.opts.resolve_s)
            finally:
                self.streams.clear()

    def _follow(self, group: asyncio.TaskGroup, wanted: tuple[Target, ...]) -> None:
        """Open a stream to each new replica, close those to replicas no longer named."""
        for target in [t for t in self.streams if t not in wanted]:
            log.info("member health reports to %s (%s) stop: no longer resolved",
                     target.dial, target.source)
            self.streams.pop(target).cancel()
        for target in wanted:
            if target not in self.streams:
                self.streams[target] = group.create_task(
                    self._stream(target), name=f"engine-health-report {target.dial}")

    async def _read_views(self) -> None:
        """Read Envoy's view every ``interval_s``; a changed one wakes every stream."""
        while True:
            address = self.admin_address()
            view = await read_view(address) if address is not None else None
            refused = self.refused()
            if view is not None and (view != self._view or refused != self._refused):
                async with self._changed:
                    self._view, self._version = view, self._version + 1
                    self._refused = refused
                    self._changed.notify_all()
            await asyncio.sleep(self.opts.interval_s)

    async def _stream(self, target: Target) -> None:
        """One replica's stream, opened again with backoff whenever it ends."""
        failures = 0
        last_error = ""
        while True:
            streamed = [False]
            try:
                async with self._channel(target) as channel:
                    await channel.stream_unary(PATH)(self._messages(streamed))
            except grpc.aio.AioRpcError as exc:
                error = f"{exc.code().name}: {exc.details()}"
                # The same refusal again says nothing new.
                log.log(logging.WARNING if error != last_error else logging.DEBUG,
                        "member health reports to %s (%s) failed: %s", target.dial,
                        target.source, error)
                last_error = error
            failures = 1 if streamed[0] else failures + 1
            await asyncio.sleep(self.opts.backoff.delay(failures))

    async def _messages(self, streamed: list[bool]) -> AsyncIterator[bytes]:
        """The full view first, then each change (nothing while nothing changes)."""
        sent: View | None = None
        sent_refused: tuple[Refusal, ...] = ()
        seen = 0
        while True:
            async with self._changed:
                await self._changed.wait_for(functools.partial(self._newer, seen))
                seen, view, refused = self._version, self._view, self._refused
            assert view is not None  # a version above 0 has a view
            if sent is None:
                message = Message(node=self.opts.node_id, full=True, hosts=view,
                                  group=self.opts.engine_group, refused=refused)
            else:
                changed, removed = diff(sent, view)
                if not changed and not removed and refused == sent_refused:
                    continue
                message = Message(node=self.opts.node_id, full=False,
                                  hosts=MappingProxyType(changed), removed=removed,
                                  refused=refused)
            for part in encode_parts(message):  # a large view: parts under gRPC's bound
                yield part
                self.sent += 1
            streamed[0] = True
            sent, sent_refused = view, refused

    def _newer(self, version: int) -> bool:
        return self._version > version

    def _channel(self, target: Target) -> grpc.aio.Channel:
        opts = self.opts
        options: list[tuple[str, Any]] = [
            # A replica that stops answering (paused, cut off) ends the stream; the xDS server
            # allows pings every 30 s, as Envoy sends them. Between two changes nothing else
            # is sent, so pings need no data in between.
            ("grpc.keepalive_time_ms", round(opts.keepalive_s * 1000)),
            ("grpc.keepalive_timeout_ms", round(opts.keepalive_timeout_s * 1000)),
            # gRPC >= 1.6x times a ping out after this one (60 s by default), not the above.
            ("grpc.http2.ping_timeout_ms", round(opts.keepalive_timeout_s * 1000)),
            ("grpc.http2.max_pings_without_data", 0)]
        if opts.ca_pem is None:
            return grpc.aio.insecure_channel(target.dial, options=options)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=opts.ca_pem.encode(),
            private_key=opts.client_key_pem.encode() if opts.client_key_pem else None,
            certificate_chain=opts.client_cert_pem.encode() if opts.client_cert_pem else None)
        if target.name:
            options.append(("grpc.ssl_target_name_override", target.name))
        return grpc.aio.secure_channel(target.dial, credentials, options=options)
