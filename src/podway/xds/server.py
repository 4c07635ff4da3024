"""The ADS gRPC server: a thin asyncio shell around ``podway.xds.protocol``.

Each stream runs two things: a reader that turns Envoy's requests into responses, and a pusher
that wakes on every cache change and sends what changed. Both write through one lock so
responses never interleave. Any number of engines may connect; each gets its own stream state.

Security: xDS carries every TLS private key Podway serves, so ``check_bind`` allows clear text
only on loopback or a unix socket, and anywhere else requires TLS *and* client certificates
(``client_ca_pem``): server-only TLS would still hand every key to anyone who can connect.
With ``local=True`` the server also listens, in clear text, on a unix socket in a private
(0700) temporary folder: that is how an engine on the same machine connects to a TLS server
without client credentials.

NACKs are logged with Envoy's error detail and the refused resources, and counted
(``podway_xds_nacks_total``); the stream holds refused resources back and offers them again with
backoff (``podway.xds.refusals``), waking for it through ``push_changes``' ``wake_at``. A closed
stream is logged with its reason. Envoy's HTTP/2 keepalive pings are allowed at any rate (gRPC's
defaults closed an idle stream every ~2 minutes for them).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.discovery.v3 import discovery_pb2 as d
from prometheus_client import Counter, Gauge

from podway.errors import ConfigError
from podway.netaddr import format_host_port, parse_host_port
from podway.xds import types
from podway.xds.cache import Cache
from podway.xds.delta import DeltaStream
from podway.xds.protocol import Ack, Event, Nack
from podway.xds.refusals import RefusalMemory
from podway.xds.sotw import SotwStream

log = logging.getLogger(__name__)

_MIN_RETRY_WAIT_S = 0.5

NACKS = Counter("podway_xds_nacks_total", "xDS responses rejected by an engine", ["type"])
PUSHES = Counter("podway_xds_pushes_total", "xDS responses sent", ["type", "mode"])
STREAMS = Gauge("podway_xds_streams", "Connected ADS streams (engines)")


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """TLS for a non-loopback xDS listener; ``client_ca_pem`` set → client certificates needed."""

    cert_pem: bytes
    key_pem: bytes
    client_ca_pem: bytes | None = None


def check_bind(address: str, tls: ServerTLS | None) -> None:
    """Refuse to serve xDS off loopback/unix sockets without TLS and client certificates."""
    if address.startswith("unix:"):
        return
    host = parse_host_port(address, what="xDS address").host
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    if tls is None:
        raise ConfigError(f"xDS address {address} is not loopback: give a TLS server "
                          "certificate (--xds-cert/--xds-key) and --xds-client-ca")
    if tls.client_ca_pem is None:
        raise ConfigError(f"xDS address {address} is not loopback: give --xds-client-ca too; "
                          "xDS carries TLS private keys, so engines must present client "
                          "certificates")


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


class AdsServicer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    def __init__(self, cache: Cache, *, on_event: Callable[[Event], None] | None = None) -> None:
        self.cache = cache
        self.on_event = on_event
        self.nacks: list[Nack] = []  # newest last; bounded
        self.streams = 0  # open ADS streams (engines connected now)
        self.refusals = RefusalMemory()  # per engine, across its reconnects

    async def StreamAggregatedResources(
            self, requests: AsyncIterator[d.DiscoveryRequest], context: Any) -> None:
        await self._serve(SotwStream(self.cache, memory=self.refusals), requests, context,
                          "sotw")

    async def DeltaAggregatedResources(
            self, requests: AsyncIterator[d.DeltaDiscoveryRequest], context: Any) -> None:
        await self._serve(DeltaStream(self.cache, memory=self.refusals), requests, context,
                          "delta")

    async def _serve(self, stream: SotwStream | DeltaStream, requests: AsyncIterator[Any],
                     context: Any, mode: str) -> None:
        lock = asyncio.Lock()
        STREAMS.inc()
        self.streams += 1

        async def send(responses: list[Any]) -> None:
            async with lock:
                for response in responses:
                    PUSHES.labels(types.SHORT_NAMES.get(response.type_url, "?"), mode).inc()
                    await context.write(response)

        nudged = asyncio.Event()

        async def read() -> None:
            async for request in requests:
                responses, events = stream.on_request(request)
                for event in events:
                    self._report(event)
                    if isinstance(event, Nack):
                        nudged.set()  # a refusal: its retry needs a timer
                await send(responses)

        reason = "the engine closed it"
        try:
            async with asyncio.TaskGroup() as group:
                reader = group.create_task(read(), name=f"xds-read-{mode}")
                pusher = group.create_task(
                    push_changes(self.cache, stream.on_change, send,
                                 wake_at=stream.next_retry_at, clock=stream.clock,
                                 nudged=nudged),
                    name=f"xds-push-{mode}")
                await reader  # the stream ends when Envoy closes it
                pusher.cancel()
        except asyncio.CancelledError:
            reason = "connection lost or server stopping"
            raise
        except Exception as exc:
            reason = f"error: {exc!r}"
            raise
        finally:
            STREAMS.dec()
            self.streams -= 1
            log.info("xds stream closed node=%s mode=%s reason=%s", stream.node or "?", mode,
                     reason)

    def _report(self, event: Event) -> None:
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


class XdsServer:
    """Owns the gRPC server; ``start`` binds, ``stop`` closes streams with a grace period."""

    def __init__(self, cache: Cache, address: str, *, tls: ServerTLS | None = None,
                 on_event: Callable[[Event], None] | None = None, local: bool = False) -> None:
        check_bind(address, tls)
        self.address = address
        self.tls = tls
        self.local = local
        self.local_target: str | None = None  # "unix:/path" once started with ``local``
        self._local_dir: str | None = None
        self.servicer = AdsServicer(cache, on_event=on_event)
        self._server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> None:
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
        if self.tls is None:
            self.port = server.add_insecure_port(self.address)
        else:
            credentials = grpc.ssl_server_credentials(
                [(self.tls.key_pem, self.tls.cert_pem)],
                root_certificates=self.tls.client_ca_pem,
                require_client_auth=self.tls.client_ca_pem is not None)
            self.port = server.add_secure_port(self.address, credentials)
        try:
            if self.local:
                self._local_dir = _private_socket_dir()
                self.local_target = f"unix:{self._local_dir}/xds.sock"
                server.add_insecure_port(self.local_target)
            await server.start()
        except BaseException:
            await self.stop(grace=0)  # remove the private folder; nothing else to undo
            raise
        self._server = server
        log.info("xds server listening address=%s port=%s", self.address, self.port)

    async def stop(self, grace: float = 1.0) -> None:
        try:
            if self._server is not None:
                await self._server.stop(grace)
                self._server = None
        finally:
            if self._local_dir is not None:
                shutil.rmtree(self._local_dir, ignore_errors=True)
                self._local_dir = self.local_target = None

    @property
    def target(self) -> str:
        """Where an engine should connect: ``host:port`` or ``unix:/path``."""
        if self.address.startswith("unix:"):
            return self.address
        return format_host_port(parse_host_port(self.address).host, self.port)


# A unix socket path must fit sun_path (108 bytes with the NUL); keep a margin.
_MAX_SOCKET_PATH = 100


def _private_socket_dir() -> str:
    """A fresh 0700 folder for the co-located engine's socket, in TMPDIR when the socket path
    fits there, else in /tmp (a long TMPDIR made the bind fail)."""
    folder = tempfile.mkdtemp(prefix="podway-xds-")
    if len(f"{folder}/xds.sock") <= _MAX_SOCKET_PATH:
        return folder
    os.rmdir(folder)
    return tempfile.mkdtemp(prefix="podway-xds-", dir="/tmp")
