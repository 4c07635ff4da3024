"""The ADS gRPC server: a thin asyncio shell around ``podway.envoy.xds.protocol``.

Each stream runs two things: a reader that turns Envoy's requests into responses, and a pusher
that wakes on every cache change and sends what changed. Both write through one lock so
responses never interleave. Any number of engines may connect; each gets its own stream state.
``engines`` counts the open streams of each node id (the engines serving now); ``handlers`` adds
services beside ADS on the same sockets and TLS.

Security (see docs/security.md): xDS carries every TLS private key Podway serves.

* A unix socket is private: its file is made mode 0600 before the server listens, so only its
  owner and root can connect (the kernel checks on ``connect``); the co-located engine's socket
  also sits in the private 0700 state folder (``start(local=...)``). Each new stream over a unix
  socket first checks every connection's peer credentials (``SO_PEERCRED``, see
  ``podway.engines.peers``) and shuts down any foreign one before anything is sent.
* A TCP listener must authenticate engines with client certificates (``client_ca_pem``), and
  ``check_bind`` refuses clear text anywhere but loopback. An unauthenticated loopback
  listener needs an explicit opt-in (``unauthenticated=True``), and even then a stream that did
  not come over a unix socket or present a verified client certificate is never sent Secrets:
  it sees the cache through ``SecretFree``, so its TLS listeners do not come up.

Engine groups: with ``groups`` set, a stream whose engine names a group in its node metadata
(``GROUP_METADATA``) is served that group's cache (``groups(name)``) instead of the whole one
(a ``PodwayError`` from ``groups`` ends the stream with RESOURCE_EXHAUSTED and one line);
the node comes with the first request (Envoy sends it once), so the cache is chosen then. The
server does not know what a group contains: whoever passes ``groups`` fills those caches.
``engine_groups`` says, for each engine with an open stream, the group it is served ("": the
whole cache; always "" without ``groups``), so the readiness gate counts it only for its pools.

Identity (``podway.engines.identity``): a stream authenticated by a client certificate is served
only when the certificate names the node id and engine group its first request claims;
otherwise it ends with PERMISSION_DENIED and one log line, before anything is sent.

NACKs are logged with Envoy's error detail and the refused resources, and counted
(``podway_xds_nacks_total``); the stream holds refused resources back and offers them again with
backoff (``podway.envoy.xds.refusals``), waking for it through ``push_changes``' ``wake_at``. A
closed stream is logged with its reason. Envoy's HTTP/2 keepalive pings are allowed at any rate
(gRPC's defaults closed an idle stream every ~2 minutes for them).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.discovery.v3 import discovery_pb2 as d
from prometheus_client import Counter, Gauge

from podway.base.errors import ConfigError, PodwayError
from podway.base.netaddr import format_host_port, parse_host_port
from podway.engines.identity import EngineIdentity, of_stream
from podway.engines.peers import authenticated, close_foreign_peers
from podway.envoy import types
from podway.envoy.xds.access import SecretFree, TableForm
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.held import HeldClusters
from podway.envoy.xds.protocol import Ack, Event, Nack
from podway.envoy.xds.refusals import RefusalMemory
from podway.envoy.xds.sotw import SotwStream
from podway.model.base import ENGINE_GROUP

log = logging.getLogger(__name__)

_MIN_RETRY_WAIT_S = 0.5
GROUP_METADATA = ENGINE_GROUP  # the engine's group, in its xDS node metadata (as the annotation)
GroupCaches = Callable[[str], Cache]

NACKS = Counter("podway_xds_nacks_total", "xDS responses rejected by an engine", ["type"])
PUSHES = Counter("podway_xds_pushes_total", "xDS responses sent", ["type", "mode"])
STREAMS = Gauge("podway_xds_streams", "Connected ADS streams (engines)")


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """TLS for a non-loopback xDS listener; ``client_ca_pem`` set → client certificates needed."""

    cert_pem: bytes
    key_pem: bytes
    client_ca_pem: bytes | None = None


def check_bind(address: str, tls: ServerTLS | None, *, unauthenticated: bool = False) -> None:
    """Refuse an xDS listener that would hand private keys to whoever connects.

    ``""`` (no listener) and unix sockets are fine; TCP needs TLS with client certificates,
    except on loopback with the explicit ``unauthenticated`` opt-in (those engines then get no
    Secrets).
    """
    if not address or address.startswith("unix:"):
        return
    if tls is not None and tls.client_ca_pem is not None:
        return
    if _is_loopback(address):
        if unauthenticated:
            return
        raise ConfigError(
            f"xDS on {address} would not authenticate engines, and any local user could "
            "connect: use a unix socket (unix:/path), give --xds-cert/--xds-key and "
            "--xds-client-ca, or opt in with --xds-unauthenticated (such engines are never "
            "sent TLS keys)")
    if tls is None:
        raise ConfigError(f"xDS address {address} is not loopback: give a TLS server "
                          "certificate (--xds-cert/--xds-key) and --xds-client-ca")
    raise ConfigError(f"xDS address {address} is not loopback: give --xds-client-ca too; "
                      "xDS carries TLS private keys, so engines must present client "
                      "certificates")


def _is_loopback(address: str) -> bool:
    host = parse_host_port(address, what="xDS address").host
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def push_changes(cache: Cache, on_change: Callable[[], list[Any]],
                       send: Callable[[list[Any]], Awaitable[None]], *,
                       wake_at: Callable[[], float | None] = lambda: None,
                       clock: Callable[[], float] = time.monotonic,
                       nudged: asyncio.Event | None = None) -> None:
    """Send what ``on_change`` yields after every cache change, and when ``wake_at`` (a
    ``clock()`` value: a refused resource due to be offered again) comes, forever.

    The next change's event is taken *before* looking at the cache and sending: a change made
    while ``send`` is awaited fires that event, so it is pushed at once instead of waiting for
    some later, unrelated change. ``nudged`` (set by the reader after a NACK) makes the pusher
    read ``wake_at`` again.
    """
    event = cache.changed()
    while True:
        deadline = wake_at()
        # A retry held back by ordering rules is looked at again at most twice a second.
        delay = None if deadline is None else max(deadline - clock(), _MIN_RETRY_WAIT_S)
        await _first_of(event, nudged, limit_s=delay)
        if nudged is not None and nudged.is_set():
            nudged.clear()
            if not event.is_set() and (wake_at() or 0) > clock():
                continue  # only a new deadline: wait for it
        if event.is_set():
            event = cache.changed()
        await send(on_change())


async def _first_of(*events: asyncio.Event | None, limit_s: float | None) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events if e is not None]
    try:
        await asyncio.wait(waiters, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


class _StreamGone(Exception):
    """A response could not be written because the stream is over (the engine left, or the
    server stops): the stream's end, not an error of the servicer."""


class AdsServicer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    def __init__(self, cache: Cache, *, on_event: Callable[[Event], None] | None = None,
                 groups: GroupCaches | None = None) -> None:
        self.cache = cache
        self.on_event = on_event
        self.groups = groups
        self.nacks: list[Nack] = []  # newest last; bounded
        self.live: set[SotwStream | DeltaStream] = set()  # open ADS streams (engines now)
        self.answered_at = 0.0  # time.monotonic() of the newest ACK or NACK from any engine
        self.refusals = RefusalMemory()  # per engine, across its reconnects
        # per SotW engine, what it holds; in the private state folder across Podway restarts
        self.held = HeldClusters()
        self.unix_paths: list[Path] = []  # unix sockets served: their peers are checked
        self.engines: dict[str, int] = {}  # node id → its open ADS streams
        # node id → the group its newest stream is served ("": everything); keys as ``engines``
        self.engine_groups: dict[str, str] = {}
        self.on_engines: list[Callable[[], None]] = []  # called when ``engines`` changes
        # Set by ``XdsServer.stop``: every stream ends on its own (status OK) instead of being
        # cancelled by gRPC when the grace period is over (gRPC logs that as an error).
        self.closing = asyncio.Event()

    async def StreamAggregatedResources(
            self, requests: AsyncIterator[d.DiscoveryRequest], context: Any) -> None:
        view, requests, group = await self._view(context, requests)
        if view is not None:
            # Scoped route tables are for delta streams: SotW gets the one-table form.
            await self._serve(SotwStream(TableForm(view), memory=self.refusals,
                                         held=self.held),
                              requests, context, "sotw", group)

    async def DeltaAggregatedResources(
            self, requests: AsyncIterator[d.DeltaDiscoveryRequest], context: Any) -> None:
        view, requests, group = await self._view(context, requests)
        if view is not None:
            await self._serve(DeltaStream(view, memory=self.refusals), requests, context,
                              "delta", group)

    async def _view(self, context: Any, requests: AsyncIterator[Any]
                    ) -> tuple[Cache | None, AsyncIterator[Any], str]:
        """The cache as this stream may see it: its engine group's (``groups``) or the whole
        one, without Secrets unless authenticated; the requests, its first one included
        (None: the stream closed before any); and the group served ("": the whole cache). A
        stream over a unix socket first has every foreign peer's connection shut down (its own
        included, if foreign: then nothing it is sent ever arrives)."""
        if str(context.peer()).startswith("unix"):
            close_foreign_peers(self.unix_paths)
        cache = self.cache
        group = ""
        identity = of_stream(context)
        if self.groups is not None or identity is not None:
            first = await anext(requests, None)
            if first is None:
                return None, requests, ""
            # Without groups served, every engine gets the whole cache whatever it names.
            group = _group_of(first.node) if self.groups is not None else ""
            if identity is not None:
                await _check_claim(identity, first.node.id, group, context)
                requests = _bound(requests, identity, context, group)
            requests = _chain(first, requests)
            if group and self.groups is not None:
                try:
                    cache = self.groups(group)
                except PodwayError as exc:  # unbounded names or counts from the network
                    log.warning("xds engine at %s refused: %s", context.peer(), exc)
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
                log.info("xds engine %s is in engine group %s", first.node.id or "?", group)
        if authenticated(context):
            return cache, requests, group
        log.warning("xds engine at %s is not authenticated: it gets no TLS secrets",
                    context.peer())
        return SecretFree(cache), requests, group

    async def _serve(self, stream: SotwStream | DeltaStream, requests: AsyncIterator[Any],
                     context: Any, mode: str, engine_group: str = "") -> None:
        STREAMS.inc()
        self.live.add(stream)
        send = self._sender(context, mode)

        nudged = asyncio.Event()
        counted: list[str] = []  # the node, once known: counted in ``engines``

        async def read() -> None:
            async for request in requests:
                due = stream.next_retry_at()
                responses, events = stream.on_request(request)
                if stream.next_retry_at() != due:
                    nudged.set()  # a new deadline (a hold begun here): the pusher waits for it
                if stream.node and not counted:
                    counted.append(stream.node)
                    self._count(stream.node, 1, engine_group)
                for event in events:
                    self._report(event)
                    if isinstance(event, Nack):
                        nudged.set()  # a refusal: its retry needs a timer
                await send(responses)

        reason = "the engine closed it"
        try:
            try:
                async with asyncio.TaskGroup() as group:
                    reader = group.create_task(read(), name=f"xds-read-{mode}")
                    pusher = group.create_task(
                        push_changes(stream.cache, stream.on_change, send,
                                     wake_at=stream.next_retry_at, clock=stream.clock,
                                     nudged=nudged),
                        name=f"xds-push-{mode}")
                    closing = group.create_task(self.closing.wait(), name=f"xds-closing-{mode}")
                    # The stream ends when Envoy closes it, or when the server stops.
                    await asyncio.wait((reader, closing), return_when=asyncio.FIRST_COMPLETED)
                    if not reader.done():
                        reason = "server stopping"
                    for task in (pusher, reader, closing):
                        task.cancel()
            except* _StreamGone:  # the engine left, or the server stops, mid-answer
                reason = "it ended while an answer was being sent"
        except asyncio.CancelledError:
            reason = "connection lost or server stopping"
            raise
        except Exception as exc:
            reason = f"error: {exc!r}"
            raise
        finally:
            STREAMS.dec()
            self.live.discard(stream)
            for node in counted:
                self._count(node, -1)
            log.info("xds stream closed node=%s mode=%s reason=%s", stream.node or "?", mode,
                     reason)

    def _sender(self, context: Any, mode: str) -> Callable[[list[Any]], Awaitable[None]]:
        """Writes a stream's responses in order; a write that fails because the stream is over
        (the engine left, or the server stops) raises ``_StreamGone``."""
        lock = asyncio.Lock()

        async def send(responses: list[Any]) -> None:
            async with lock:
                for response in responses:
                    PUSHES.labels(types.SHORT_NAMES.get(response.type_url, "?"), mode).inc()
                    try:
                        await context.write(response)
                    except grpc.aio.InternalError as exc:  # its failed batch: the peer left
                        raise _StreamGone from exc
                    except Exception as exc:
                        if self.closing.is_set() or context.done():
                            raise _StreamGone from exc
                        raise

        return send

    @property
    def streams(self) -> int:
        """Open ADS streams (engines connected now)."""
        return len(self.live)

    def served(self) -> bool:
        """Every engine connected now holds everything its cache has (``DeltaStream.served``);
        True with none connected."""
        return all(stream.served() for stream in self.live)

    def _count(self, node: str, delta: int, group: str = "") -> None:
        self.engines[node] = self.engines.get(node, 0) + delta
        if delta > 0:
            self.engine_groups[node] = group
        if self.engines[node] <= 0:
            del self.engines[node]
            self.engine_groups.pop(node, None)
        for listener in self.on_engines:
            listener()

    def _report(self, event: Event) -> None:
        self.answered_at = time.monotonic()
        if isinstance(event, Nack):
            NACKS.labels(types.SHORT_NAMES.get(event.type_url, "?")).inc()
            # The same content refused again on a backoff retry says nothing new: info.
            log.log(logging.WARNING if event.attempt == 1 else logging.INFO,
                    "xds NACK node=%s type=%s version=%s resources=%s attempt=%d: %s",
                    event.node, types.SHORT_NAMES.get(event.type_url, event.type_url),
                    event.version, ",".join(event.resources) or "?", event.attempt,
                    event.message)
            self.nacks = [*self.nacks[-99:], event]
        elif isinstance(event, Ack):
            log.debug("xds ACK node=%s type=%s version=%s", event.node,
                      types.SHORT_NAMES.get(event.type_url, event.type_url), event.version)
        if self.on_event is not None:
            self.on_event(event)


async def _check_claim(identity: EngineIdentity, node: str, group: str, context: Any) -> None:
    """End the stream (PERMISSION_DENIED, one log line) when it claims a node id, or is served
    an engine group ("": the whole cache), that its client certificate does not name."""
    why = identity.refusal(node=node, group=group)
    if why is not None:
        log.warning("xds engine at %s refused: %s", context.peer(), why)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)


async def _bound(requests: AsyncIterator[Any], identity: EngineIdentity, context: Any,
                 group: str) -> AsyncIterator[Any]:
    """The requests, each that names a node checked against the certificate (Envoy names it
    in the first only; a later one may not switch to another node's name)."""
    async for request in requests:
        if request.HasField("node"):
            await _check_claim(identity, request.node.id, group, context)
        yield request


async def _chain(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield first
    async for item in rest:
        yield item


def _group_of(node: Any) -> str:
    """The engine group a node names in its metadata ("" when none)."""
    value = node.metadata.fields.get(GROUP_METADATA) if node.HasField("metadata") else None
    return value.string_value.strip() if value is not None else ""


class XdsServer:
    """Owns the gRPC server; ``start`` binds, ``stop`` closes streams with a grace period.

    ``address`` "" means no public listener: only the co-located engine's unix socket that
    ``start(local=...)`` adds.
    """

    def __init__(self, cache: Cache, address: str, *, tls: ServerTLS | None = None,
                 on_event: Callable[[Event], None] | None = None,
                 unauthenticated: bool = False, groups: GroupCaches | None = None) -> None:
        check_bind(address, tls, unauthenticated=unauthenticated)
        self.address = address
        self.tls = tls
        self.local_target: str | None = None  # "unix:/path" once started with ``local``
        self.servicer = AdsServicer(cache, on_event=on_event, groups=groups)
        self._server: grpc.aio.Server | None = None
        self.port = 0
        # More services on the same server, socket and TLS (``podway.engines.member_health``);
        # added before ``start``.
        self.handlers: list[grpc.GenericRpcHandler] = []

    @property
    def unix_paths(self) -> list[Path]:
        """The unix sockets served (``podway.engines.peers.UnixPeers``); their peers are checked."""
        return self.servicer.unix_paths

    async def start(self, *, local: Path | None = None) -> None:
        """Bind and serve; ``local``: also a unix socket there (in a private folder) for the
        engine on this machine, which needs no TLS or client certificate."""
        self.servicer.closing.clear()
        server = grpc.aio.server(options=[
            ("grpc.max_send_message_length", 256 * 1024 * 1024),
            ("grpc.keepalive_time_ms", 30_000),
            # Envoy pings the xDS server every 30 s (HTTP/2 keepalive, engine bootstrap); gRPC's
            # defaults count a ping more often than every 5 minutes as abuse and close the
            # connection after two (GOAWAY too_many_pings): an idle stream "closed" every ~2 min.
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.http2.max_ping_strikes", 0),
        ])
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(self.servicer, server)
        if self.handlers:
            server.add_generic_rpc_handlers(tuple(self.handlers))
        if self.address.startswith("unix:"):
            _bind_unix(server, Path(self.address.removeprefix("unix:")))
            self.servicer.unix_paths.append(Path(self.address.removeprefix("unix:")))
        elif self.address and self.tls is None:
            self.port = server.add_insecure_port(self.address)
        elif self.address and self.tls is not None:
            credentials = grpc.ssl_server_credentials(
                [(self.tls.key_pem, self.tls.cert_pem)],
                root_certificates=self.tls.client_ca_pem,
                require_client_auth=self.tls.client_ca_pem is not None)
            self.port = server.add_secure_port(self.address, credentials)
        if local is not None:
            _bind_unix(server, local)
            self.servicer.unix_paths.append(local)
            self.local_target = f"unix:{local}"
            self.servicer.held.folder = local.parent  # the private state folder
        await server.start()
        self._server = server
        log.info("xds server listening address=%s port=%s local=%s", self.address or "-",
                 self.port, local or "-")

    async def stop(self, grace: float = 1.0) -> None:
        """End every ADS stream, then stop the server (other services get ``grace``)."""
        self.servicer.closing.set()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        self.servicer.held.discard_files()

    @property
    def target(self) -> str:
        """Where an engine should connect: ``host:port`` or ``unix:/path``."""
        if self.local_target is not None and not self.address:
            return self.local_target
        if self.address.startswith("unix:"):
            return self.address
        return format_host_port(parse_host_port(self.address).host, self.port)


def _bind_unix(server: grpc.aio.Server, path: Path) -> None:
    """Bind a unix socket at ``path`` (replacing a dead server's socket file, refusing a live
    one's) and make it 0600 before the server listens: nobody but its owner and root can ever
    connect."""
    if path.is_socket():
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
            except OSError:
                path.unlink()  # nobody listens: what a killed server left
            else:
                raise ConfigError(f"another server is listening on the xDS socket {path}")
    server.add_insecure_port(f"unix:{path}")  # binds now; accepts only after start()
    os.chmod(path, 0o600)
