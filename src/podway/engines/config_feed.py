"""The IR for engines that program themselves from it (HAProxy, kernel): a gRPC stream beside ADS.

Envoy takes its configuration over xDS; an engine of another kind (``podway engine --engine
haproxy|kernel``) takes the IR itself, the engine group's part of it (``subset``: the same
listeners and pools an Envoy of that group is sent), and renders it locally
(``podway.haproxy.render``, ``podway.kernel.plan``). The stream lives on the controller's xDS
gRPC server (``XdsServer.handlers``): the same socket, TLS, client certificates and identity
rules as ADS and member health, so no new port, certificate or trust decision exists.

Wire: one server-streaming method, ``/podway.engine.v1.Configuration/Watch``, served with a
generic handler (no generated code). The request is compact JSON::

    {"v": 1, "node": "edge-1", "group": "shop", "engine": "haproxy"}

and every answer is the whole IR of the group as it is now (``podway.ir.dump.to_wire``,
certificates and keys included), with the generation it came from::

    {"v": 1, "generation": 7, "ir": {"listeners": [...], "pools": [...]}}

The first answer comes as soon as the controller has a configuration; later ones only when the
group's IR changed (a new generation that leaves the group's part as it was sends nothing).

Invariants:

* Only authenticated engines are served (a unix-socket peer, checked like an ADS peer, or a
  verified client certificate): the IR holds private keys. An unauthenticated loopback client
  (``--xds-unauthenticated``) is refused with PERMISSION_DENIED and one log line. With a
  client certificate, the node id and group must be ones it names
  (``podway.engines.identity``).
* An engine group whose kind the controller's configuration names (``kinds``: group → kind)
  takes engines of that kind only: another kind is refused with FAILED_PRECONDITION and one
  line naming both (an Envoy of that group is refused on ADS alike: ``refusal``).
* ``engine_groups``: every engine with a stream open now → its group ("": none); the
  readiness gate counts them as it counts engines on ADS (one that never reports blocks True),
  and ``on_engines`` listeners are told when the set changes.
* Bounded input: a request is at most ``MAX_REQUEST`` bytes and its names ``MAX_TEXT``
  characters; one that does not parse ends the stream (INVALID_ARGUMENT).
* A slow engine never makes a backlog: each stream sends the newest IR when it can, skipping
  the ones it had no time for. A group's IR is encoded once per generation, whatever the
  number of its engines.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import grpc

from podway.base.backoff import Backoff
from podway.base.errors import PodwayError
from podway.engines.identity import of_stream
from podway.engines.peers import UnixPeers, admit
from podway.engines.report_targets import Names, Resolver, resolve, targets, xds_addresses
from podway.engines.reporter import ReportOptions, channel
from podway.ir import IR
from podway.ir.dump import to_wire
from podway.ir.load import from_data

log = logging.getLogger(__name__)

SERVICE = "podway.engine.v1.Configuration"
METHOD = "Watch"
PATH = f"/{SERVICE}/{METHOD}"
VERSION = 1
KINDS = ("envoy", "haproxy", "kernel")  # engine kinds a group may name
FEED_KINDS = ("haproxy", "kernel")  # kinds that take the IR here (Envoy: xDS)
MAX_TEXT = 253  # characters in a node, group or kind name
MAX_REQUEST = 4096  # bytes of one request

Subset = Callable[[str], IR]  # group ("": none, the whole IR) → the IR its engines serve


class FeedError(PodwayError):
    """A request or an answer of the configuration stream that cannot be read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    node: str
    group: str = ""
    engine: str = "haproxy"


def encode_request(request: Request) -> bytes:
    return json.dumps({"v": VERSION, "node": request.node, "group": request.group,
                       "engine": request.engine}, separators=(",", ":")).encode()


def decode_request(data: bytes) -> Request:
    """One request; ``FeedError`` with one line when it is not one of this version."""
    if len(data) > MAX_REQUEST:
        raise FeedError(f"a request longer than {MAX_REQUEST} bytes")
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise FeedError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("v") != VERSION:
        raise FeedError(f"not a version {VERSION} configuration request")
    node, group, engine = raw.get("node"), raw.get("group", ""), raw.get("engine", "")
    if not (isinstance(node, str) and node and isinstance(group, str)
            and isinstance(engine, str)):
        raise FeedError("a request needs a node name, and 'group' and 'engine' as strings")
    if max(len(node), len(group), len(engine)) > MAX_TEXT:
        raise FeedError(f"a node, group or engine name longer than {MAX_TEXT} characters")
    if engine not in FEED_KINDS:
        raise FeedError(f"engine {engine[:40]!r} takes no IR here (one of "
                        f"{', '.join(FEED_KINDS)}; Envoy takes xDS)")
    return Request(node=node, group=group.strip(), engine=engine)


def encode_answer(generation: int, ir: IR) -> bytes:
    return json.dumps({"v": VERSION, "generation": generation, "ir": to_wire(ir)},
                      separators=(",", ":")).encode()


def decode_answer(data: bytes) -> tuple[int, IR]:
    """(generation, IR); ``FeedError`` with one line when it does not read."""
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict) or raw.get("v") != VERSION:
            raise FeedError(f"not a version {VERSION} configuration")
        generation = raw.get("generation")
        if not isinstance(generation, int) or not isinstance(raw.get("ir"), dict):
            raise FeedError("a configuration needs 'generation' and 'ir'")
        return generation, from_data(raw["ir"])
    except FeedError:
        raise
    except (ValueError, TypeError, KeyError, PodwayError) as exc:
        raise FeedError(f"the configuration does not read: {str(exc)[:200]}") from None


def refusal(kinds: Mapping[str, str], group: str, engine: str) -> str | None:
    """Why an engine of kind ``engine`` may not serve ``group`` (None: it may): the group's
    kind, when the configuration names one, must be the engine's."""
    wanted = kinds.get(group)
    if wanted is None or wanted == engine:
        return None
    return (f"engine group {group or '(none)'!r} is configured for {wanted} engines "
            f"(engineGroups in the controller's configuration), not {engine}")


class ConfigFeed:
    """The controller's side: the newest IR, streamed to every engine that asks."""

    def __init__(self, kinds: Callable[[], Mapping[str, str]] = dict) -> None:
        self.kinds = kinds  # group → its configured engine kind (read at each new stream)
        self.on_engines: list[Callable[[], None]] = []
        self._subset: Subset | None = None
        self._generation = 0
        self._wake = asyncio.Event()
        self._streams: dict[object, tuple[str, str]] = {}  # stream → (node, group)
        self._kinds: dict[object, str] = {}  # stream → the engine kind it said it is
        self._encoded: dict[str, bytes] = {}  # group → its answer for this generation

    @property
    def engine_groups(self) -> Mapping[str, str]:
        """Every engine with a stream open now → its group (its newest stream's)."""
        return MappingProxyType(dict(self._streams.values()))

    @property
    def engine_kinds(self) -> Mapping[str, tuple[str, str]]:
        """Every engine with a stream open now → (its group, its kind: haproxy, kernel)."""
        return MappingProxyType({node: (group, self._kinds[stream])
                                 for stream, (node, group) in self._streams.items()})

    def publish(self, generation: int, subset: Subset) -> None:
        """A new configuration: ``subset(group)`` is what an engine of ``group`` serves."""
        self._subset, self._generation = subset, generation
        self._encoded = {}
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    async def serve(self, data: bytes, context: Any, *, unix_paths: Any = ()
                    ) -> AsyncIterator[bytes]:
        """One engine's stream (the gRPC method's body)."""
        await admit(context, unix_paths, "the configuration stream")
        peer = str(context.peer())
        try:
            request = decode_request(data)
        except FeedError as exc:
            log.warning("configuration stream from %s refused: %s", peer, exc)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # not reached: abort raises
        identity = of_stream(context)
        why = identity.refusal(node=request.node, group=request.group) \
            if identity is not None else None
        if why is not None:
            log.warning("configuration stream from %s refused: %s", peer, why)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        why = refusal(self.kinds(), request.group, request.engine)
        if why is not None:
            log.warning("configuration stream from %s (node %s) refused: %s", peer,
                        request.node, why)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)
        stream = object()
        self._streams[stream] = (request.node, request.group)
        self._kinds[stream] = request.engine
        self._notify()
        log.info("configuration stream to node=%s group=%s engine=%s", request.node,
                 request.group or "-", request.engine)
        try:
            sent = ""
            while True:
                wake = self._wake
                subset = self._subset
                if subset is not None:
                    answer = self._answer(request.group, subset)
                    body = answer[answer.index(b'"ir":'):].decode()
                    if body != sent:  # the group's part moved (not only the generation)
                        sent = body
                        yield answer
                await wake.wait()
        finally:
            del self._streams[stream]
            del self._kinds[stream]
            self._notify()
            log.info("configuration stream ended node=%s", request.node)

    def _answer(self, group: str, subset: Subset) -> bytes:
        """The group's answer for the current generation, encoded once for all its engines."""
        found = self._encoded.get(group)
        if found is None:
            found = self._encoded[group] = encode_answer(self._generation, subset(group))
        return found

    def _notify(self) -> None:
        for listener in self.on_engines:
            listener()

    def handler(self, server: UnixPeers) -> grpc.GenericRpcHandler:
        """The generic handler serving ``Watch`` on ``server`` (its unix peers checked)."""

        async def watch(data: bytes, context: Any) -> AsyncIterator[bytes]:
            async for answer in self.serve(data, context, unix_paths=server.unix_paths):
                yield answer

        return grpc.method_handlers_generic_handler(SERVICE, {
            METHOD: grpc.unary_stream_rpc_method_handler(watch)})


async def follow(opts: ReportOptions, engine: str, *, resolver: Resolver = resolve,
                 backoff: Backoff | None = None) -> AsyncIterator[tuple[int, IR]]:
    """The engine's side: (generation, IR) from the controller, for ever. The replicas
    ``opts.xds`` names are tried in turn (a name: each address it resolves to); a broken or
    refused stream is opened again with backoff, on the next replica. Every replica serves the
    same configuration (each runs the pipeline), so which one answers does not matter."""
    addresses = xds_addresses(opts.xds)
    names = Names(addresses, resolver=resolver)
    request = encode_request(Request(node=opts.node_id, group=opts.engine_group, engine=engine))
    wait = backoff or opts.backoff
    failures, turn, last_error = 0, 0, ""
    while True:
        resolved = await names.refresh() if names.names else {}
        found = targets(addresses, resolved, sni=opts.sni)
        if not found:
            failures += 1
            await asyncio.sleep(wait.delay(failures))
            continue
        target = found[turn % len(found)]
        turn += 1
        got = False
        try:
            async with channel(opts, target) as chan:
                call = chan.unary_stream(PATH)(request)
                async for data in call:
                    try:
                        yield decode_answer(data)
                    except FeedError as exc:
                        log.error("configuration from %s refused: %s", target.dial, exc)
                        call.cancel()
                        break
                    got, failures, last_error = True, 0, ""
        except grpc.aio.AioRpcError as exc:
            error = f"{exc.code().name}: {exc.details()}"
            log.log(logging.WARNING if error != last_error else logging.DEBUG,
                    "configuration stream from %s (%s) failed: %s", target.dial, target.source,
                    error)
            last_error = error
        failures = 1 if got else failures + 1
        await asyncio.sleep(wait.delay(failures))
