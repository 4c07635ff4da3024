"""Member health from engines to the controller: a small gRPC service beside ADS.

Each engine (``podway.engines.reporter``) reads its data plane's view of every member and
streams it to the controller that configures it, over the same gRPC server, socket and TLS as xDS
(``XdsServer.handlers``), so no new port, certificate or trust decision exists. The controller
keeps the latest view of each engine here and the readiness gate
(``podway.programs.controller.readiness``) reads it.

Wire: one client-streaming method, ``/podway.engine.v1.MemberHealth/Report``, served with a
generic handler (no generated code). Each message is compact JSON::

    {"v": 1, "node": "edge-1", "full": true, "group": "shop",
     "hosts": [["pool/default/web/80", "10.0.0.7:8080", "healthy", ""], ...],
     "removed": [["pool/default/web/80", "10.0.0.9:8080"], ...]}

The first message of a stream is ``full`` (the whole view: it replaces what an earlier stream
of that node said); later ones carry only changed and removed hosts. A report larger than
``MAX_MESSAGE_BYTES`` (a view of ~10,000 hosts and more; gRPC refuses messages over 4 MiB) is
sent in parts (``encode_parts``): every part but the last says ``"more": true``, only the first
may be ``full``, and the controller applies the parts together when the last arrives, so it
never judges with half a view. (A controller that does not know ``more`` applies the first part
as the full view and the others as changes: the same view once the last part is in.)
``group`` (optional, in the full message only) is the engine group the engine runs with
(``podway engine --engine-group``): the controller then counts it only for that group's
pools. A report without it (an older engine, or an engine without a group) is an engine
without a group. The answer, sent when the engine ends the stream, is ``{}``.

``unsupported`` (optional, in every message but a later part: the whole list each time) names
the objects the engine serves but not exactly as asked (the HAProxy engine's
``UnsupportedValue`` findings), ``[kind, namespace, name, message, closed]`` (``closed``: not
served at all). The controller turns each into that object's ``UnsupportedValue`` problem, as
``podway run --engine haproxy`` does locally, and drops them when the engine's stream ends.

``config`` (optional, in a first part only, and only when it changed since the stream last sent
it) is the configuration the engine serves, file name → text (the HAProxy engine's
``haproxy.cfg`` and maps, no certificate: they hold keys), at most ``MAX_CONFIG_CHARS``; the
controller keeps each node's newest for ``podway config dump`` and drops it with the stream.

``refusing`` (optional, in every message but a later part: the whole current set each time)
names the listeners the engine cannot serve now, ``[listener, reason]`` (the remote HAProxy
engine's: a port it cannot bind, a configuration HAProxy refused). Unlike ``refused`` (events,
each told once), it is state: the controller records each as that engine's rejection of the
listener, as a NACK would be, clears one the engine no longer names, and drops them all when
the engine's stream ends.

Invariants:

* Only authenticated engines are heard (a unix-socket peer, which is first checked like an ADS
  peer, or a verified client certificate): a report decides whether Pods turn Ready, so an
  unauthenticated loopback client (``--xds-unauthenticated``) is refused with
  PERMISSION_DENIED and one log line. With a client certificate, every report's node id (and
  a full report's group) must be one the certificate names (``podway.engines.identity``), or
  the stream ends the same way: no engine speaks for another.
* A node's view lives exactly as long as its newest stream: when that stream ends the view is
  dropped (the engine stops counting); an older stream of the same node that ends later changes
  nothing. A stream whose first message is not ``full`` or a message that does not parse ends
  the stream (INVALID_ARGUMENT) and drops its view.
* Bounded input: a message is at most gRPC's default 4 MiB (engines send parts of at most
  ``MAX_MESSAGE_BYTES``; a report in parts is bounded by ``MAX_HOSTS``); every text field at most
  ``MAX_TEXT`` characters (reasons, which reach Pod conditions, are cut to ``MAX_REASON``); one
  node's view at most ``MAX_HOSTS`` hosts, whether sent whole or grown by changes. A report
  past a bound ends its stream (INVALID_ARGUMENT) and drops its view, like one that does not
  parse.
* Listeners (``subscribe``) are called synchronously after every applied change; they only
  schedule work (the readiness gate sets an event). Change listeners (``on_change``) are told,
  before those, what changed: the hosts of one node whose state moved, or None for the whole
  node (its view appeared or went), so a reader can re-judge only the pods of those hosts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import grpc

from podway.engines.identity import of_stream
from podway.engines.peers import UnixPeers, admit
from podway.engines.report_fields import (
    MAX_CONFIG_CHARS,
    MAX_REASON,
    MAX_REFUSED,
    MAX_TEXT,
    Finding,
    Refusal,
    Refused,
    ReportError,
    config_of,
    findings_of,
    list_of,
    refused_of,
    refusing_of,
)

# The report's fields live in ``report_fields``; readers import them from here too.
__all__ = [
    "MAX_CONFIG_CHARS",
    "MAX_REASON",
    "PATH",
    "Finding",
    "Health",
    "HostKey",
    "HostState",
    "MemberHealthReports",
    "Message",
    "Refusal",
    "Refused",
    "ReportError",
    "decode",
    "diff",
    "encode",
    "encode_parts",
    "join",
]

log = logging.getLogger(__name__)

SERVICE = "podway.engine.v1.MemberHealth"
METHOD = "Report"
PATH = f"/{SERVICE}/{METHOD}"
VERSION = 1
MAX_HOSTS = 200_000  # hosts in one node's view
MAX_MESSAGE_BYTES = 1 << 20  # one part of a report (a quarter of gRPC's default 4 MiB limit)

HostKey = tuple[str, str]  # (cluster = pool name, "address:port")
# (node, its hosts that changed; None: its whole view appeared or went)
Changed = Callable[[str, frozenset[HostKey] | None], None]


class Health(StrEnum):
    HEALTHY = "healthy"  # in the engine's pool and passing its checks (if it has any)
    PENDING = "pending"  # in the pool, not checked yet: neither healthy nor unhealthy
    UNHEALTHY = "unhealthy"  # failed its active check or ejected by outlier detection


@dataclass(frozen=True, slots=True)
class HostState:
    health: Health
    reason: str = ""  # why not healthy, in words ("failed active health check")


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    node: str
    full: bool
    hosts: Mapping[HostKey, HostState]
    removed: tuple[HostKey, ...] = ()
    group: str = ""  # the engine's group ("": none); sent and read in full messages only
    more: bool = False  # a part: the report goes on in the next message of the stream
    refused: tuple[Refusal, ...] = ()
    """Listeners the engine accepted and then could not serve (no NACK was sent: issue 23.2),
    the newest failure of each; every message but a later part carries the whole list."""
    unsupported: tuple[Finding, ...] = ()  # the whole list, as ``refused``
    config: Mapping[str, str] | None = None  # the engine's files; None: unchanged, or none
    refusing: tuple[Refused, ...] = ()  # the whole current set, as ``unsupported``


def encode(message: Message) -> bytes:
    """One message, whatever its size (``encode_parts`` keeps each under the bound)."""
    return _encode(message.node, full=message.full, group=message.group, more=message.more,
                   hosts=[json.dumps([c, a, s.health.value, s.reason], separators=(",", ":"))
                    for (c, a), s in sorted(message.hosts.items())],
                   removed=[json.dumps(list(key), separators=(",", ":"))
                            for key in message.removed], refused=message.refused,
                   unsupported=message.unsupported, config=message.config,
                   refusing=message.refusing)


def _encode(node: str, *, full: bool, group: str, more: bool, hosts: list[str],
            removed: list[str], refused: tuple[Refusal, ...] = (),
            unsupported: tuple[Finding, ...] = (), config: Mapping[str, str] | None = None,
            refusing: tuple[Refused, ...] = ()) -> bytes:
    head: dict[str, Any] = {"v": VERSION, "node": node, "full": full}
    if full and group:  # absent otherwise: what older controllers read
        head["group"] = group
    if more:
        head["more"] = True
    if refused:  # absent otherwise: what older controllers read
        head["refused"] = [list(r) for r in refused]
    if unsupported:  # absent otherwise: what older controllers read
        head["unsupported"] = [list(f) for f in unsupported]
    if config is not None:  # absent otherwise: what older controllers read
        head["config"] = dict(config)
    if refusing:  # absent otherwise (none): what older controllers read
        head["refusing"] = [list(r) for r in refusing]
    text = json.dumps(head, separators=(",", ":"))[:-1]
    return f'{text},"hosts":[{",".join(hosts)}],"removed":[{",".join(removed)}]}}'.encode()


def encode_parts(message: Message, *, limit: int = 0) -> list[bytes]:
    """``message`` as one or more messages of at most ``limit`` bytes (default
    ``MAX_MESSAGE_BYTES``; a single host entry longer than that still goes, alone): the first
    part keeps ``full`` and the group, every part but the last says ``more``."""
    limit = limit or MAX_MESSAGE_BYTES
    hosts = [json.dumps([c, a, s.health.value, s.reason], separators=(",", ":"))
             for (c, a), s in sorted(message.hosts.items())]
    removed = [json.dumps(list(key), separators=(",", ":")) for key in message.removed]
    room = limit - len(_encode(message.node, full=message.full, group=message.group, more=True,
                               hosts=[], removed=[], refused=message.refused,
                               unsupported=message.unsupported, refusing=message.refusing))
    parts: list[tuple[list[str], list[str]]] = [([], [])]
    used = 0
    for which, entries in ((0, hosts), (1, removed)):
        for entry in entries:
            if used and used + len(entry) + 1 > room:
                parts.append(([], []))
                used = 0
            parts[-1][which].append(entry)
            used += len(entry) + 1
    last = len(parts) - 1
    return [_encode(message.node, full=message.full and i == 0,
                    group=message.group if i == 0 else "", more=i < last, hosts=h, removed=r,
                    refused=message.refused if i == 0 else (),
                    unsupported=message.unsupported if i == 0 else (),
                    config=message.config if i == 0 else None,
                    refusing=message.refusing if i == 0 else ())
            for i, (h, r) in enumerate(parts)]


def join(first: Message, then: Message) -> Message:
    """Two parts of one report as one message (``then``'s entries win, as when applied in
    order): ``full`` and the group from the first part, ``more`` from the later one."""
    hosts = dict(first.hosts)
    for key in then.removed:
        hosts.pop(key, None)
    hosts.update(then.hosts)
    gone = {*first.removed, *then.removed} - then.hosts.keys()
    return Message(node=first.node, full=first.full, hosts=MappingProxyType(hosts),
                   removed=tuple(sorted(gone)), group=first.group, more=then.more,
                   refused=first.refused, unsupported=first.unsupported, config=first.config,
                   refusing=first.refusing)


def decode(data: bytes) -> Message:
    """One message; ``ReportError`` with one line when it is not a report of this version."""
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise ReportError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("v") != VERSION:
        raise ReportError(f"not a version {VERSION} member health report")
    node, full = raw.get("node"), raw.get("full")
    if not isinstance(node, str) or not node or not isinstance(full, bool):
        raise ReportError("a report needs a node name and 'full'")
    group, more = raw.get("group", ""), raw.get("more", False)
    if not isinstance(group, str):
        raise ReportError("'group' must be a string")
    if not isinstance(more, bool):
        raise ReportError("'more' must be true or false")
    if len(node) > MAX_TEXT or len(group) > MAX_TEXT:
        raise ReportError(f"a node or group name longer than {MAX_TEXT} characters")
    hosts: dict[HostKey, HostState] = {}
    for entry in list_of(raw, "hosts"):
        if not (isinstance(entry, list) and len(entry) == 4
                and all(isinstance(x, str) for x in entry)
                and len(entry[0]) <= MAX_TEXT and len(entry[1]) <= MAX_TEXT):
            raise ReportError(f"bad host entry {str(entry)[:80]}")
        try:
            hosts[(entry[0], entry[1])] = HostState(Health(entry[2]), entry[3][:MAX_REASON])
        except ValueError:
            raise ReportError(f"unknown health {entry[2][:40]!r}") from None
    removed = []
    for entry in list_of(raw, "removed"):
        if not (isinstance(entry, list) and len(entry) == 2
                and all(isinstance(x, str) for x in entry)):
            raise ReportError(f"bad removed entry {str(entry)[:80]}")
        removed.append((entry[0], entry[1]))
    if len(hosts) > MAX_HOSTS or len(removed) > MAX_HOSTS:
        raise ReportError(f"more than {MAX_HOSTS} hosts in one report")
    return Message(node=node, full=full, hosts=MappingProxyType(hosts), removed=tuple(removed),
                   group=group.strip() if full else "", more=more, refused=refused_of(raw),
                   unsupported=findings_of(raw), config=config_of(raw),
                   refusing=refusing_of(raw))


def diff(before: Mapping[HostKey, HostState], after: Mapping[HostKey, HostState]
         ) -> tuple[dict[HostKey, HostState], tuple[HostKey, ...]]:
    """What changed from ``before`` to ``after``: (new or changed hosts, removed hosts)."""
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    return changed, tuple(sorted(k for k in before if k not in after))


class MemberHealthReports:
    """The controller's copy of each connected engine's member health (see the module
    docstring); ``view(node)`` is None for a node that has no report stream open."""

    def __init__(self) -> None:
        self._views: dict[str, dict[HostKey, HostState]] = {}
        self._groups: dict[str, str] = {}  # node → its group as its newest full report says
        self._owner: dict[str, object] = {}  # node → the stream whose view is current
        self._listeners: list[Callable[[], None]] = []
        self._changes: list[Changed] = []
        self._refusals: list[Callable[[str, Refusal], None]] = []
        self._refused_seen: dict[str, frozenset[int]] = {}  # node → seqs already told
        self._findings: dict[str, tuple[Finding, ...]] = {}  # node → its newest list
        self._finding_hooks: list[Callable[[str, tuple[Finding, ...]], None]] = []
        self._configs: dict[str, Mapping[str, str]] = {}  # node → the files it serves
        self._refusing: dict[str, tuple[Refused, ...]] = {}  # node → its newest set
        self._refusing_hooks: list[Callable[[str, tuple[Refused, ...]], None]] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def on_refused(self, hook: Callable[[str, Refusal], None]) -> None:
        """Call ``hook(node, refusal)`` once for each listener failure an engine reports (a
        listener it accepted and could not serve): the caller records it as that engine's
        rejection of the listener, as a NACK would be."""
        self._refusals.append(hook)

    def on_findings(self, hook: Callable[[str, tuple[Finding, ...]], None]) -> None:
        """Call ``hook(node, findings)`` whenever a node's list of objects it does not serve
        exactly changes (``()``: none any more, or its stream ended)."""
        self._finding_hooks.append(hook)

    def on_refusing(self, hook: Callable[[str, tuple[Refused, ...]], None]) -> None:
        """Call ``hook(node, refusing)`` whenever the set of listeners a node says it cannot
        serve now changes (``()``: none any more, or its stream ended)."""
        self._refusing_hooks.append(hook)

    def on_change(self, listener: Changed) -> None:
        """Call ``listener(node, hosts)`` with what each applied message or closed stream
        changed: the hosts (added, changed or removed) of ``node``, or None when the node's
        whole view appeared or went."""
        self._changes.append(listener)

    def view(self, node: str) -> Mapping[HostKey, HostState] | None:
        found = self._views.get(node)
        return None if found is None else MappingProxyType(found)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self._views)

    def configs(self) -> Mapping[str, Mapping[str, str]]:
        """Each reporting node → the configuration files it last reported it serves."""
        return MappingProxyType(dict(self._configs))

    @property
    def groups(self) -> Mapping[str, str]:
        """Each reporting node → the engine group its report names ("": none)."""
        return MappingProxyType(self._groups)

    def apply(self, stream: object, message: Message) -> None:
        """Apply one message of ``stream`` (any object naming the stream); ``ReportError`` when
        it would grow the node's view past ``MAX_HOSTS`` (the stream must then end: ``close``
        drops the view)."""
        hosts: frozenset[HostKey] | None
        if message.full:
            before = self._views.get(message.node)
            if before is None or self._groups.get(message.node) != message.group:
                hosts = None
            else:
                changed, removed = diff(before, message.hosts)
                hosts = frozenset(changed.keys() | set(removed))
            self._owner[message.node] = stream
            self._views[message.node] = dict(message.hosts)
            self._groups[message.node] = message.group
        elif self._owner.get(message.node) is stream:
            view = self._views[message.node]
            view.update(message.hosts)
            for key in message.removed:
                view.pop(key, None)
            hosts = frozenset(message.hosts.keys() | set(message.removed))
            if len(view) > MAX_HOSTS:
                self._changed(message.node, hosts)
                raise ReportError(f"more than {MAX_HOSTS} hosts in the view of {message.node}")
        else:
            return  # a stale stream of a node that reconnected: its news are old
        if message.config is not None:
            self._configs[message.node] = message.config
        if not message.more:
            self._told(message.node, message.refused)
            self._found(message.node, message.unsupported)
            self._now_refusing(message.node, message.refusing)
        self._changed(message.node, hosts)
        self._notify()

    def _told(self, node: str, refused: tuple[Refusal, ...]) -> None:
        """Tell each refusal not told before (a new stream repeats the engine's list)."""
        seen = self._refused_seen.get(node, frozenset())
        for refusal in refused:
            if refusal.seq not in seen:
                for hook in self._refusals:
                    hook(node, refusal)
        self._refused_seen[node] = seen | {r.seq for r in refused} if len(seen) < MAX_REFUSED \
            else frozenset(r.seq for r in refused)

    def _found(self, node: str, findings: tuple[Finding, ...]) -> None:
        if self._findings.get(node, ()) != findings:
            self._findings[node] = findings
            for hook in self._finding_hooks:
                hook(node, findings)

    def _now_refusing(self, node: str, refusing: tuple[Refused, ...]) -> None:
        if self._refusing.get(node, ()) != refusing:
            self._refusing[node] = refusing
            for hook in self._refusing_hooks:
                hook(node, refusing)

    def close(self, stream: object) -> None:
        """``stream`` ended: the views (and findings) it owns are dropped."""
        gone = [node for node, owner in self._owner.items() if owner is stream]
        for node in gone:
            del self._owner[node]
            del self._views[node]
            del self._groups[node]
            self._configs.pop(node, None)
            self._found(node, ())
            self._findings.pop(node, None)
            self._now_refusing(node, ())
            self._refusing.pop(node, None)
            self._changed(node, None)
        if gone:
            self._notify()

    def _changed(self, node: str, hosts: frozenset[HostKey] | None) -> None:
        for listener in self._changes:
            listener(node, hosts)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    async def serve(self, requests: AsyncIterator[bytes], context: Any,
                    *, unix_paths: Iterable[Any] = ()) -> bytes:
        """One engine's report stream (the gRPC method's body)."""
        await admit(context, unix_paths, "the member health report")
        peer = str(context.peer())
        identity = of_stream(context)
        stream = object()
        node = "?"
        try:
            first = True
            parts: Message | None = None  # a report in parts, until its last part
            async for data in requests:
                try:
                    message = decode(data)
                    if parts is not None:
                        if message.node != parts.node or message.full:
                            raise ReportError("a part of a report must follow its first part")
                        message = join(parts, message)
                        if len(message.hosts) > MAX_HOSTS or len(message.removed) > MAX_HOSTS:
                            raise ReportError(f"more than {MAX_HOSTS} hosts in one report")
                    if first and not message.full:
                        raise ReportError("the first report of a stream must be full")
                    # Every report, not only the first: one stream may speak for one node.
                    why = identity.refusal(  # a change message carries no group
                        node=message.node, group=message.group if message.full else None) \
                        if identity is not None else None
                    if why is not None:
                        log.warning("member health report from %s refused: %s", peer, why)
                        await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
                    if message.more:  # a part: the report is applied with its last part
                        parts = message
                        continue
                    parts = None
                    if first:
                        node, first = message.node, False
                        log.info("member health reports from node=%s group=%s (%d hosts)",
                                 node, message.group or "-", len(message.hosts))
                    self.apply(stream, message)
                except ReportError as exc:
                    log.warning("member health report from %s (node %s) refused: %s",
                                peer, node, exc)
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            self.close(stream)
            log.info("member health reports ended node=%s", node)
        return b"{}"

    def handler(self, server: UnixPeers) -> grpc.GenericRpcHandler:
        """The generic handler serving ``Report`` on ``server`` (its unix peers checked)."""

        async def report(requests: AsyncIterator[bytes], context: Any) -> bytes:
            return await self.serve(requests, context, unix_paths=server.unix_paths)

        return grpc.method_handlers_generic_handler(SERVICE, {
            METHOD: grpc.stream_unary_rpc_method_handler(report)})
