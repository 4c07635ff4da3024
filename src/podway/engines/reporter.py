"""Every engine's side of member health: its view of each member, sent to the controller.

An engine (``podway engine --engine envoy|haproxy|kernel``) runs a ``Reporter`` beside its data
plane. Every ``interval_s`` the reporter calls the engine's ``read`` once (Envoy: its admin
``/clusters``, ``podway.envoy.engine.health_report``; HAProxy: ``show stat``,
``podway.haproxy.health``; the kernel engine: its own TCP checks, ``podway.kernel.health``),
which gives each member as healthy / pending / unhealthy keyed (pool, "address:port"), the
controller's names. It sends that view to **every** controller replica
(``podway.engines.report_targets``: each ``--xds`` address, every address a DNS name resolves
to, names looked up again every ``resolve_s``), one long-lived gRPC stream per replica
(``podway.engines.member_health``), with the TLS settings and client certificate of the engine's
configuration channel. Only the leading replica writes the readiness gate, and the engine's
configuration stream may go to any replica: reporting to all of them is how the leader hears
this engine wherever its configuration comes from.

Invariants:

* A stream starts with the whole view (``full``, naming the engine's group, if any: the
  controller counts the engine only for the pools its group is sent), so a controller that
  restarted, or a stream that broke, never combines news with a view it did not see; later
  messages carry changes only. A report over ``MAX_MESSAGE_BYTES`` goes in parts (gRPC refuses
  messages over 4 MiB: a view of ~50,000 hosts sent whole was refused on every retry).
  Nothing is sent before ``read`` first gives a view: "never reported" stays distinguishable
  from "reported no hosts".
* ``read`` giving None (the data plane not answering) keeps the last view.
* Replicas are independent: each stream has its own task, its own backoff and its own place in
  the view's history (one read serves them all); a replica that is down, refuses or hangs is
  retried with backoff and never delays the others. A replica gone from the DNS answer has its
  stream closed; a new one gets a stream that starts with the full view.
* A stream to a replica that stops answering (paused, partitioned) is found dead by gRPC
  keepalive pings (every 30 s, 5 s to answer; the xDS server allows them) and opened again.
  A stream that cannot send fast enough skips to the newest view: no backlog builds up.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import grpc

from podway.base.backoff import Backoff
from podway.engines.member_health import (
    PATH,
    Finding,
    HostKey,
    HostState,
    Message,
    Refusal,
    Refused,
    diff,
    encode_parts,
)
from podway.engines.report_targets import Names, Resolver, Target, resolve, targets, xds_addresses

log = logging.getLogger(__name__)

View = Mapping[HostKey, HostState]
ReadView = Callable[[], Awaitable[View | None]]  # the engine's view now; None: no answer


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportOptions:
    """Where and how often to report; TLS settings as the engine's configuration channel."""

    node_id: str
    engine_group: str = ""  # --engine-group: named in each stream's first (full) message
    xds: str | tuple[str, ...]  # the --xds addresses ("host:port" or "unix:/path"): every
    # replica they name (and every address a name resolves to) gets the reports
    ca_pem: str | None = None  # set: TLS, verifying the controller's certificate
    sni: str = ""  # name to verify (default: the DNS name of each address; an IP: itself)
    client_cert_pem: str | None = None
    client_key_pem: str | None = None
    # (certificate, key) files read at each new channel instead of the two PEMs: a renewed
    # pair (``podway.programs.engine_cert``) is used from the next connection on.
    client_files: tuple[Path, Path] | None = None
    interval_s: float = 2.0  # between two reads of the engine's view
    resolve_s: float = 5.0  # between two lookups of the DNS names (Envoy's own DNS refresh)
    keepalive_s: float = 30.0  # ping a replica this often (as Envoy pings its xDS server) ...
    keepalive_timeout_s: float = 5.0  # ... and give the stream up when a ping is not answered
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=10.0))


def channel(opts: ReportOptions, target: Target) -> grpc.aio.Channel:
    """A gRPC channel to one controller replica with the engine's TLS settings and keepalive
    (every engine-to-controller stream but Envoy's own xDS uses one)."""
    options: list[tuple[str, Any]] = [
        # A replica that stops answering (paused, cut off) ends the stream; the xDS server
        # allows pings every 30 s, as Envoy sends them. Between two changes nothing else
        # is sent, so pings need no data in between.
        ("grpc.keepalive_time_ms", round(opts.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", round(opts.keepalive_timeout_s * 1000)),
        # gRPC >= 1.6x times a ping out after this one (60 s by default), not the above.
        ("grpc.http2.ping_timeout_ms", round(opts.keepalive_timeout_s * 1000)),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_receive_message_length", 64 << 20)]  # a configuration may be large
    if opts.ca_pem is None:
        return grpc.aio.insecure_channel(target.dial, options=options)
    cert, key = opts.client_cert_pem, opts.client_key_pem
    if opts.client_files is not None:
        try:
            cert, key = (p.read_text() for p in opts.client_files)
        except OSError as exc:  # kept 0600 in the engine's own folder: should not happen
            log.warning("client certificate files unreadable (%s); using the pair read at "
                        "start", exc)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=opts.ca_pem.encode(), private_key=key.encode() if key else None,
        certificate_chain=cert.encode() if cert else None)
    if target.name:
        options.append(("grpc.ssl_target_name_override", target.name))
    return grpc.aio.secure_channel(target.dial, credentials, options=options)


class Reporter:
    """Streams this engine's member health to every controller replica until cancelled."""

    def __init__(self, opts: ReportOptions, read: ReadView, *,
                 resolver: Resolver = resolve,
                 refused: Callable[[], tuple[Refusal, ...]] = tuple,
                 unsupported: Callable[[], tuple[Finding, ...]] = tuple,
                 config: Callable[[], Mapping[str, str] | None] = lambda: None,
                 refusing: Callable[[], tuple[Refused, ...]] = tuple) -> None:
        self.opts = opts
        self.read = read
        # Listeners the engine accepted and could not serve (Envoy: ``Engine.listener_failures``,
        # a bind that failed after the ACK): sent with the view, so the controller records them
        # as this engine's rejections.
        self.refused = refused
        self._refused: tuple[Refusal, ...] = ()
        # Objects the engine serves but not exactly as asked (HAProxy: its ``UnsupportedValue``
        # findings): sent with the view, so they reach the objects' status as a local engine's.
        self.unsupported = unsupported
        self._unsupported: tuple[Finding, ...] = ()
        # The configuration the engine serves (HAProxy: haproxy.cfg and maps), sent when it
        # changed, so the controller's ``config dump`` shows a remote engine's.
        self.config = config
        self._config: Mapping[str, str] | None = None
        # Listeners the engine cannot serve now (HAProxy: a port it cannot bind, a reload it
        # refused): the whole set each time it changes, so a fixed one clears on the controller.
        self.refusing = refusing
        self._refusing: tuple[Refused, ...] = ()
        self.addresses = xds_addresses(opts.xds)
        self.names = Names(self.addresses, resolver=resolver)
        self.sent = 0  # messages sent (all streams)
        self.streams: dict[Target, asyncio.Task[None]] = {}  # one per replica now
        self._view: View | None = None  # the engine's view as last read; None: not yet
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
        """Read the engine's view every ``interval_s``; a changed one wakes every stream."""
        while True:
            view = await self.read()
            refused, unsupported = self.refused(), self.unsupported()
            config, refusing = self.config(), self.refusing()
            if view is not None and (view != self._view or refused != self._refused
                                     or unsupported != self._unsupported
                                     or config != self._config or refusing != self._refusing):
                async with self._changed:
                    self._view, self._version = view, self._version + 1
                    self._refused, self._unsupported = refused, unsupported
                    self._config, self._refusing = config, refusing
                    self._changed.notify_all()
            await asyncio.sleep(self.opts.interval_s)

    async def _stream(self, target: Target) -> None:
        """One replica's stream, opened again with backoff whenever it ends."""
        failures = 0
        last_error = ""
        while True:
            streamed = [False]
            try:
                async with channel(self.opts, target) as chan:
                    await chan.stream_unary(PATH)(self._messages(streamed))
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
        sent_unsupported: tuple[Finding, ...] = ()
        sent_config: Mapping[str, str] | None = None
        sent_refusing: tuple[Refused, ...] = ()
        seen = 0
        while True:
            async with self._changed:
                await self._changed.wait_for(functools.partial(self._newer, seen))
                seen, view, refused = self._version, self._view, self._refused
                unsupported, config, refusing = self._unsupported, self._config, self._refusing
            assert view is not None  # a version above 0 has a view
            news = config if config != sent_config else None  # only when it changed
            if sent is None:
                message = Message(node=self.opts.node_id, full=True, hosts=view,
                                  group=self.opts.engine_group, refused=refused,
                                  unsupported=unsupported, config=config, refusing=refusing)
            else:
                changed, removed = diff(sent, view)
                if not changed and not removed and refused == sent_refused \
                        and unsupported == sent_unsupported and news is None \
                        and refusing == sent_refusing:
                    continue
                message = Message(node=self.opts.node_id, full=False,
                                  hosts=MappingProxyType(changed), removed=removed,
                                  refused=refused, unsupported=unsupported, config=news,
                                  refusing=refusing)
            for part in encode_parts(message):  # a large view: parts under gRPC's bound
                yield part
                self.sent += 1
            streamed[0] = True
            sent, sent_refused, sent_unsupported = view, refused, unsupported
            sent_config, sent_refusing = config, refusing

    def _newer(self, version: int) -> bool:
        return self._version > version
