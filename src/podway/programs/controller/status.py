"""The status writer: the status document, written back to the objects through the API.

``desired`` is pure: from the status document (``podway.status``) of one pipeline state it
computes the ``status`` each object should carry — Gateway API conditions, listeners with
``attachedRoutes`` and route parents exactly as the translator computed them (engine refusals
included: a refused listener is ``Programmed=False``), Service and Ingress
``status.loadBalancer.ingress`` (the VIP the listener binds, else ``--lb-address``).
``with_times`` then stamps conditions: a condition whose status did not change keeps its
``lastTransitionTime`` (Kubernetes' rule), a new or flipped one gets ``now``. On routes, the
``parents`` entries of other controllers are kept as they are.

``StatusWriter`` follows the pipeline's states (coalesced: a burst of states costs one pass) and
PATCHes the ``status`` subresource (a JSON merge patch of ``{"status": …}``) only of objects
whose status differs from what the API holds and from what it last wrote, with bounded
concurrency. A pass costs the change, not the cluster (docs/design/state-readers.md): the
status document is built incrementally (``DocumentBuilder``), ``Desired`` recomputes only the
targets whose entry, Service/Ingress object or bound addresses changed (equal to ``desired``
from scratch, tested), and only those targets — plus any whose PATCH failed — are compared.
Nothing else is written: an unchanged state costs no request. A refused PATCH
(an API error, or the API away) is logged and written again after a backoff (``retry_failed``)
even when no new state comes; a status of a shape no controller writes counts as empty.

Only the leader writes (``podway.programs.controller.leader``): a pass takes the current ``Fence``
and each PATCH checks it right before it is sent, so a replica that lost the Lease (or is not the
leader) sends nothing, even for a pass it had begun. A follower still builds the status document
(events are computed from it). ``resync`` forgets what was written: a new leader's next pass
compares every status with what the API holds and PATCHes only the differences.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.ir import IR, Listener
from podway.kube.errors import NotFound, api_error
from podway.model import Ingress, Service
from podway.model.base import ObjectRef
from podway.model.snapshot import Key
from podway.pipeline import Pipeline, Rejection, State
from podway.programs.controller.leader import ALWAYS, Fence, Leadership
from podway.programs.controller.metrics import ControllerMetrics
from podway.programs.controller.source import CRD_STATUS_KINDS, KindInfo
from podway.status import StatusDocument
from podway.status.document import DocumentBuilder, KindChanges, id_changes
from podway.translate import TranslateOptions
from podway.translate import service as service_rules
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.core.status import to_api

log = logging.getLogger(__name__)

RETRY = Backoff(base=0.5, cap=30.0)  # rewrites after failed PATCHes

Target = tuple[str, Key]  # (kind, (namespace, name))
Status = dict[str, Any]


def desired(doc: StatusDocument, state: State, *, opts: TranslateOptions,
            lb_address: str | None) -> dict[Target, Status]:
    """The status every object Podway writes should carry (no timestamps yet), from scratch."""
    out: dict[Target, Status] = {}
    for ref, entry in doc.objects.items():
        if ref.kind in CRD_STATUS_KINDS and entry.status is not None:
            out[(ref.kind, (ref.namespace, ref.name))] = to_api(entry.status, kind=ref.kind)
    bound = bound_addresses(state.ir)
    named = listener_names(state.ir)
    snapshot = state.update.snapshot
    for key, service in snapshot.kind(Service).items():
        status = _service_status(key, service, bound, doc, opts=opts, lb_address=lb_address,
                                 listeners=named.get(("Service", key), ()))
        if status is not None:
            out[("Service", key)] = status
    for key in snapshot.kind(Ingress):
        status = _ingress_status(key, bound, doc, lb_address)
        if status is not None:
            out[("Ingress", key)] = status
    return out


class Desired:
    """``desired`` kept from one state to the next: only the targets whose inputs changed are
    recomputed — the objects the status document says changed, the Services and Ingresses
    added, replaced or removed (by identity), and those whose bound addresses moved."""

    def __init__(self, *, opts: TranslateOptions, lb_address: str | None) -> None:
        self._opts = opts
        self._lb_address = lb_address
        self._doc: StatusDocument | None = None
        self._want: dict[Target, Status] = {}
        self._kinds = KindChanges(("Service", "Ingress"))
        self._bound = BoundAddresses()

    @property
    def want(self) -> Mapping[Target, Status]:
        """Every target's desired status as of the last ``update`` (do not mutate)."""
        return self._want

    def update(self, doc: StatusDocument, state: State) -> set[Target]:
        """Bring ``want`` to ``doc`` and ``state``; the targets whose status may differ."""
        delta = doc.changed_since(self._doc)
        snapshot = state.update.snapshot
        services, ingresses = snapshot.kind(Service), snapshot.kind(Ingress)
        replaced = self._kinds.update(snapshot, generation=state.generation,
                                      changed=state.update.changed)
        moved = self._bound.update(state.ir.listeners)
        if delta is None:  # another lineage (the first document): from scratch
            before = self._want
            self._want = desired(doc, state, opts=self._opts, lb_address=self._lb_address)
            self._doc = doc
            return set(before) | set(self._want)
        touched: set[Target] = set()
        for ref in delta:
            target = (ref.kind, (ref.namespace, ref.name))
            if ref.kind in CRD_STATUS_KINDS:
                entry = doc.objects.get(ref)
                if entry is not None and entry.status is not None:
                    self._want[target] = to_api(entry.status, kind=ref.kind)
                elif self._want.pop(target, None) is None:
                    continue
            elif ref.kind not in ("Service", "Ingress"):
                continue  # no status of its own to write
            touched.add(target)
        touched |= replaced
        touched |= moved | self._bound.renamed
        bound = self._bound.bound
        out: set[Target] = set()
        for target in touched:
            kind, key = target
            status: Status | None
            if kind == "Service":
                service = services.get(key)
                status = None if service is None else _service_status(
                    key, service, bound, doc, opts=self._opts,
                    lb_address=self._lb_address,
                    listeners=self._bound.names.get(target, ()))
            elif kind == "Ingress":
                status = _ingress_status(key, bound, doc, self._lb_address) \
                    if key in ingresses else None
            else:
                out.add(target)  # set above
                continue
            if status is None:
                if self._want.pop(target, None) is not None:
                    out.add(target)
            elif status != self._want.get(target):
                self._want[target] = status
                out.add(target)
        self._doc = doc
        return out


class BoundAddresses:
    """``bound_addresses`` from one listener tuple to the next: only the targets of the
    listeners added or removed (by identity, an id index at C speed) are worked out again, and
    those that bind several addresses (their order is the listeners' order, which may move):
    one route change — its listener replaced among thousands — costs that listener."""

    def __init__(self) -> None:
        self._listeners: tuple[Listener, ...] = ()
        self._ids: dict[int, Listener] = {}
        self._of: dict[Target, dict[int, Listener]] = {}  # target → its listeners, by id
        self._several: set[Target] = set()  # targets bound to more than one address
        self.bound: dict[Target, list[str]] = {}  # what ``bound_addresses`` gives
        self.names: dict[Target, tuple[tuple[str, str], ...]] = {}  # ``listener_names``
        self.renamed: set[Target] = set()  # targets whose ``names`` the last update changed

    def update(self, listeners: tuple[Listener, ...]) -> set[Target]:
        """Follow ``listeners``; the targets whose bound addresses changed."""
        self.renamed = set()
        if listeners is self._listeners:
            return set()
        ids = dict(zip(map(id, listeners), listeners, strict=True))
        added, removed = id_changes(self._ids, ids)
        touched = set(self._several)
        for i, step in [(i, -1) for i in removed] + [(i, 1) for i in added]:
            listener = (self._ids if step < 0 else ids)[i]
            for origin in listener.origins:
                target = (origin.kind, (origin.namespace, origin.name))
                mine = self._of.setdefault(target, {})
                if step < 0:
                    mine.pop(i, None)
                else:
                    mine[i] = listener
                touched.add(target)
        self._listeners, self._ids = listeners, ids
        position: dict[int, int] | None = None
        moved: set[Target] = set()
        for target in touched:
            mine = self._of[target]
            addresses = list(dict.fromkeys(listener.address for listener in mine.values()))
            if len(addresses) > 1:  # in the order of the listeners (the first one counts)
                if position is None:
                    position = dict(zip(map(id, reversed(listeners)),
                                        range(len(listeners) - 1, -1, -1), strict=True))
                found = position
                addresses = list(dict.fromkeys(
                    mine[i].address for i in sorted(mine, key=lambda i: found[i])))
                self._several.add(target)
            else:
                self._several.discard(target)
            names = tuple(sorted({(ls.name, ls.address) for ls in mine.values()}))
            if not mine:
                del self._of[target]
            if names != self.names.get(target, ()):
                self.renamed.add(target)
                if names:
                    self.names[target] = names
                else:
                    del self.names[target]
            if addresses != self.bound.get(target, []):
                moved.add(target)
                if addresses:
                    self.bound[target] = addresses
                else:
                    del self.bound[target]
        return moved


def bound_addresses(ir: IR) -> dict[Target, list[str]]:
    """Every address each object's listeners bind, in listener order."""
    bound: dict[Target, list[str]] = {}
    for listener in ir.listeners:
        for origin in listener.origins:
            seen = bound.setdefault((origin.kind, (origin.namespace, origin.name)), [])
            if listener.address not in seen:
                seen.append(listener.address)
    return bound


def listener_names(ir: IR) -> dict[Target, tuple[tuple[str, str], ...]]:
    """Each object's listeners as (name, address), sorted."""
    out: dict[Target, set[tuple[str, str]]] = {}
    for listener in ir.listeners:
        for origin in listener.origins:
            out.setdefault((origin.kind, (origin.namespace, origin.name)), set()).add(
                (listener.name, listener.address))
    return {target: tuple(sorted(names)) for target, names in out.items()}


def _service_status(key: Key, service: Service, bound: Mapping[Target, list[str]],
                    doc: StatusDocument, *, opts: TranslateOptions, lb_address: str | None,
                    listeners: Iterable[tuple[str, str]] = ()) -> Status | None:
    if not service_rules.is_ours(service, opts):
        return None
    found = doc.objects.get(ObjectRef("Service", *key))
    refused = {r.resource: r for r in (found.rejections if found is not None else ())
               if r.type_name == "Listener"}
    mine = list(listeners)
    addresses = bound.get(("Service", key), [])
    if opts.vips is None and refused:
        # An address none of whose listeners an engine took serves nothing of this Service:
        # it is not advertised (external-dns would publish a dead address). With --vip-pools
        # the address stays: it is the allocation, which the status carries across restarts.
        live = {address for name, address in mine if name not in refused}
        addresses = [a for a in addresses if a in live]
    # Every VIP the Service binds (an IPAM grant may hold several): the published status
    # is also how the allocation survives a restart (podway.programs.ipam reads it back).
    ips = dict.fromkeys(ip for address in addresses
                        if (ip := _published(address, lb_address)))
    status: Status = {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}}
    conditions = [programmed_condition(mine, refused, found.problems if found else (),
                                       service.metadata.generation)]
    if opts.vips is not None:
        conditions.append(vip_condition(
            list(ips), found.problems if found is not None else (),
            service.metadata.generation))
    status["conditions"] = conditions
    return status


PROGRAMMED_CONDITION = "podway.io/Programmed"


def programmed_condition(listeners: list[tuple[str, str]], refused: Mapping[str, Rejection],
                         problems: Iterable[Problem], generation: int) -> Status:
    """Whether the engines serve the Service: False with the engine's message when one refused
    a listener of it (Envoy refuses a listener it cannot bind: its port taken), False when it
    has no listener (the translator's error says why), True when every listener was taken."""
    def condition(status: str, reason: str, message: str) -> Status:
        return {"type": PROGRAMMED_CONDITION, "status": status, "reason": reason,
                "message": message[:1024], "observedGeneration": generation}

    if refused:
        name = min(refused)
        first = refused[name]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        return condition("False", "EngineRefused", f"engine {first.node} refused listener "
                         f"{name}{more}: {first.message}")
    if not listeners:
        error = next((p for p in problems if p.severity is Severity.ERROR), None)
        return condition("False", "NotServed", error.message if error is not None
                         else "no listener serves this Service")
    return condition("True", "Programmed", f"{len(listeners)} listener(s) configured on "
                     "the engines")


def _ingress_status(key: Key, bound: Mapping[Target, list[str]], doc: StatusDocument,
                    lb_address: str | None) -> Status | None:
    found = doc.objects.get(ObjectRef("Ingress", *key))
    if found is None or not found.owned:
        return None
    addresses = bound.get(("Ingress", key))
    ip = _published(addresses[0] if addresses else None, lb_address) if found.accepted \
        else None
    return {"loadBalancer": {"ingress": [{"ip": ip}] if ip else []}}


VIP_CONDITION = "podway.io/VIPAllocated"
# Problems of the VIP allocation (podway.programs.ipam): they make the condition False.
VIP_REASONS = frozenset({Reason.POOL_EXHAUSTED, Reason.ADDRESS_IN_USE, Reason.ADDRESS_NOT_IN_POOL,
                         Reason.UNKNOWN_POOL, Reason.ADDRESS_NOT_ASSIGNED})


def vip_condition(ips: list[str], problems: Iterable[Problem], generation: int) -> Status:
    """The Service condition saying whether the IPAM gave it its VIPs (with ``--vip-pools``):
    False with the allocation problem's reason and message while it is pending."""
    pending = next((p for p in problems if p.reason in VIP_REASONS
                    or (p.reason is Reason.INVALID_ADDRESS and p.field in (
                        "spec.loadBalancerIP", "metadata.annotations[podway.io/vip]"))), None)
    if pending is not None:
        return {"type": VIP_CONDITION, "status": "False", "reason": str(pending.reason),
                "message": pending.message, "observedGeneration": generation}
    return {"type": VIP_CONDITION, "status": "True", "reason": "Allocated",
            "message": f"VIPs: {', '.join(ips)}" if ips else "allocated",
            "observedGeneration": generation}


def _published(address: str | None, lb_address: str | None) -> str | None:
    """The address to publish: a specific bind address (a VIP), else ``--lb-address``."""
    if address is None:
        return None
    try:
        if not ipaddress.ip_address(address).is_unspecified:
            return address
    except ValueError:
        return None
    return lb_address


def with_times(kind: str, want: Status, before: Status | None, now: str,
               controller_name: str) -> Status:
    """``want`` with ``lastTransitionTime`` on every condition (kept when the condition's status
    did not change) and, for routes, other controllers' ``parents`` entries kept. A ``before``
    of a shape no controller writes (someone edited the status by hand) counts as empty."""
    try:
        return _with_times(want, before or {}, now, controller_name)
    except (AttributeError, TypeError, KeyError):
        return _with_times(want, {}, now, controller_name)


def _with_times(want: Status, before: Status, now: str, controller_name: str) -> Status:
    out = dict(want)
    if "conditions" in want:
        out["conditions"] = _stamp(want["conditions"], before.get("conditions"), now)
    if "listeners" in want:
        old = {ls.get("name"): ls for ls in before.get("listeners") or []}
        out["listeners"] = [{**ls, "conditions": _stamp(
            ls["conditions"], (old.get(ls["name"]) or {}).get("conditions"), now)}
            for ls in want["listeners"]]
    for field, ref_key in (("parents", "parentRef"), ("ancestors", "ancestorRef")):
        if field not in want and field not in before:
            continue
        old_entries = before.get(field) or []
        old = {_freeze(p.get(ref_key)): p for p in old_entries
               if p.get("controllerName") == controller_name}
        mine = [{**p, "conditions": _stamp(p["conditions"], (old.get(_freeze(p[ref_key]))
                                                             or {}).get("conditions"), now)}
                for p in want.get(field) or []]
        others = [p for p in old_entries if p.get("controllerName") != controller_name]
        if mine or others or field in want:
            out[field] = others + mine
    return out


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _stamp(conditions: list[Status], before: list[Status] | None, now: str) -> list[Status]:
    old = {c.get("type"): c for c in before or []}
    out = []
    for condition in conditions:
        previous = old.get(condition["type"])
        keep = previous is not None and previous.get("status") == condition["status"] \
            and previous.get("lastTransitionTime")
        out.append({**condition,
                    "lastTransitionTime": previous["lastTransitionTime"] if keep and previous
                    else now})
    return out


def same(a: Status | None, b: Status | None) -> bool:
    """Equal as the API would store them (missing and empty are the same)."""
    return bool(_clean(a or {}) == _clean(b or {}))


def covers(current: Status | None, written: Status) -> bool:
    """``current`` (what the API holds) still says everything ``written`` said: the same
    values, lists of the same length; fields the API added (defaults such as a load-balancer
    ingress's ``ipMode``) do not count as a change."""
    return _covers(_clean(current or {}), _clean(written))


def _covers(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _covers(have[k], v)
                                              for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(
            _covers(h, w) for h, w in zip(have, want, strict=True))
    return bool(have == want)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusWriter:
    """Follows a pipeline and PATCHes changed statuses (see the module docstring)."""

    def __init__(self, api: client.ApiClient, pipeline: Pipeline, *,
                 current: Callable[[str, Key], Status | None],
                 kind_info: Callable[[str], KindInfo | None], opts: TranslateOptions,
                 lb_address: str | None, metrics: ControllerMetrics, concurrency: int = 32,
                 clock: Callable[[], str] = now_rfc3339,
                 leadership: Leadership = ALWAYS) -> None:
        self._api = api
        self._pipeline = pipeline
        self._current = current
        self._kind_info = kind_info
        self._opts = opts
        self._lb_address = lb_address
        self._metrics = metrics
        self._limit = asyncio.Semaphore(concurrency)
        self._clock = clock
        self._leadership = leadership
        self._written: dict[Target, Status] = {}  # stamped, as last written or found
        self._wanted: dict[Target, Status] = {}  # unstamped, as last written or found
        self._documents = DocumentBuilder()
        self._desired = Desired(opts=opts, lb_address=lb_address)
        # Targets whose desired status changed since a leader's pass looked at them, or
        # whose PATCH failed: the only ones a pass compares (``resync``: all of them).
        self._pending: set[Target] = set()
        self._seen: tuple[Any, ...] = ()
        self._lock = asyncio.Lock()
        self.failed = asyncio.Event()  # a PATCH failed: ``retry_failed`` writes again
        self.drift = asyncio.Event()  # someone else changed a status: ``repair`` rewrites it
        self._drifted: set[Target] = set()
        self.passes = 0  # passes that wrote something (for tests and the benchmark)
        self.last_document: StatusDocument | None = None

    def observed(self, kind: str, key: Key, status: Status) -> None:
        """The API now holds ``status`` for an object (a watch event). One that differs from
        what this writer last wrote there was written by someone else (a user, a stale
        replica, another controller): forget it was written, so the next pass (``repair``)
        compares and rewrites it. O(1): only that object is looked at."""
        target = (kind, key)
        written = self._written.get(target)
        if written is None or written is status or covers(status, written):
            return
        self._drifted.add(target)
        self.drift.set()

    async def repair(self, *, every_s: float = 60.0, min_gap_s: float = 1.0) -> None:
        """Until cancelled: rewrite statuses someone else changed — at once after a watch event
        said so (at most once per ``min_gap_s``, so two writers that disagree do not spin), and
        every ``every_s`` after comparing each written status with what the API holds (a
        change the watch did not deliver)."""
        loop = asyncio.get_running_loop()
        next_sweep = loop.time() + every_s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_sweep - loop.time())):
                    await self.drift.wait()
            if loop.time() >= next_sweep:
                next_sweep = loop.time() + every_s
                for target, written in list(self._written.items()):
                    current = self._current(*target)
                    if current is not written and not covers(current, written):
                        self._drifted.add(target)
            self.drift.clear()
            await self._repair()
            await asyncio.sleep(min_gap_s)

    async def _repair(self) -> None:
        state = self._pipeline.state
        if not self._drifted or state is None:
            return
        async with self._lock:
            drifted, self._drifted = self._drifted, set()
            for target in drifted:
                self._written.pop(target, None)
                self._wanted.pop(target, None)
            if not self._leadership.fence().valid():
                return  # a follower repairs nothing (a new leader compares everything)
            log.info("status of %d object(s) changed by someone else: writing it again",
                     len(drifted))
            self._metrics.status_repairs.inc(len(drifted))
            self._pending |= drifted
            self._seen = ()
            await self._write(state)

    def last_written(self, kind: str, key: Key) -> Status | None:
        """The status last written to (or found current on) an object, as sent."""
        return self._written.get((kind, key))

    async def run(self) -> None:
        async for state in self._pipeline.states():
            await self.write(state)

    async def retry_failed(self) -> None:
        """Until cancelled: after a pass with failed PATCHes, write the newest state again
        (backoff from 0.5 s to 30 s), so a status is not left stale when no new state comes."""
        attempt = 0
        while True:
            await self.failed.wait()
            attempt += 1
            await asyncio.sleep(RETRY.delay(attempt))
            self.failed.clear()
            state = self._pipeline.state
            if state is not None:
                self._seen = ()
                await self.write(state)
            if not self.failed.is_set():
                attempt = 0

    async def write(self, state: State) -> int:
        """Write what changed for one state; the number of PATCHes due (0 on a follower)."""
        async with self._lock:  # the follower and the retrier never interleave passes
            return await self._write(state)

    async def resync(self) -> None:
        """Forget what was written and found: the next pass compares every status with what
        the API holds (a new leader writes only what differs)."""
        async with self._lock:
            self._seen = ()
            self._written.clear()
            self._wanted.clear()
            self._pending.update(self._desired.want)

    async def _write(self, state: State) -> int:
        # Pools are left out: which pools exist (and their Services) changes only with the
        # listeners or the statuses; a pool alone changes when its members move.
        seen = (state.result.statuses, state.result.problems, state.rejections,
                state.ir.listeners, state.update.snapshot.objects.get("Service"),
                state.update.snapshot.objects.get("Ingress"))
        if _same_inputs(seen, self._seen):
            return 0  # members moved, nothing a status shows
        self._seen = seen
        doc = self._documents.of_state(state)
        self.last_document = doc
        self._pending |= self._desired.update(doc, state)
        fence = self._leadership.fence()
        if not fence.valid():
            return 0  # a follower: the leader writes (``resync`` when this one leads)
        want = self._desired.want
        now = self._clock()
        todo: list[tuple[Target, Status, Status]] = []
        pending, self._pending = self._pending, set()
        for target in pending:
            status = want.get(target)
            if status is None:  # no longer ours to write
                self._written.pop(target, None)
                self._wanted.pop(target, None)
                continue
            if self._wanted.get(target) is status or self._wanted.get(target) == status:
                continue  # written (or found current) as it is now
            before = self._written.get(target) or self._current(*target)
            stamped = with_times(target[0], status, before, now, self._opts.gateway_controller)
            if same(stamped, self._written.get(target)) or same(stamped,
                                                                 self._current(*target)):
                self._written[target] = stamped
                self._wanted[target] = status
                continue
            todo.append((target, status, stamped))
        if todo:
            self.passes += 1
            await asyncio.gather(*(self._patch(t, w, s, fence) for t, w, s in todo))
        return len(todo)

    async def _patch(self, target: Target, wanted: Status, status: Status, fence: Fence
                     ) -> None:
        kind, (namespace, name) = target
        info = self._kind_info(kind)
        if info is None:
            return
        body = {"status": status}
        async with self._limit:
            if not fence.valid():  # the Lease was lost while this pass waited: drop it
                self._metrics.fenced_writes.labels(writer="status").inc()
                return
            try:
                await patch_status(self._api, info, namespace, name, body)
            except NotFound:
                self._metrics.status_writes.labels(kind=kind, result="gone").inc()
                return
            except Exception as exc:
                self._metrics.status_writes.labels(kind=kind, result="error").inc()
                log.warning("status of %s %s/%s not written: %s", kind, namespace, name, exc)
                self._pending.add(target)  # again with the next state, or after a backoff
                self._seen = ()
                self.failed.set()
                return
        self._written[target] = status
        self._wanted[target] = wanted
        self._metrics.status_writes.labels(kind=kind, result="ok").inc()


def _same_inputs(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same inputs: problems and rejections (positions 1 and 2, small tuples) equal, every
    other part the very same object (identity, not ``id``: the id of a freed object can be
    reused; not equality: comparing two IRs is O(IR))."""
    return len(a) == len(b) and all(x is y or (i in (1, 2) and x == y)
                                     for i, (x, y) in enumerate(zip(a, b, strict=True)))


async def patch_status(api: client.ApiClient, info: KindInfo, namespace: str, name: str,
                       body: Mapping[str, Any]) -> None:
    """A JSON merge patch of the status subresource of one object (typed API errors)."""
    kwargs: dict[str, Any] = {"_content_type": "application/merge-patch+json",
                              "_preload_content": False}
    resp: Any
    try:
        if info.kind == "Service":
            resp = await client.CoreV1Api(api).patch_namespaced_service_status(
                name, namespace, body, **kwargs)
        elif info.kind == "Ingress":
            resp = await client.NetworkingV1Api(api).patch_namespaced_ingress_status(
                name, namespace, body, **kwargs)
        elif info.namespaced:
            resp = await client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
                info.group, info.version, namespace, info.plural, name, body, **kwargs)
        else:
            resp = await client.CustomObjectsApi(api).patch_cluster_custom_object_status(
                info.group, info.version, info.plural, name, body, **kwargs)
    except client.exceptions.ApiException as exc:
        raise api_error(exc) from None
    try:
        if resp.status >= 400:  # a raw response (_preload_content=False) does not raise
            raise api_error(_Refused(resp.status, (await resp.text())[:200],
                                     dict(getattr(resp, "headers", None) or {})))
    finally:
        resp.release()


class _Refused:
    """A refused PATCH in the shape ``api_error`` reads."""

    def __init__(self, status: int, reason: str, headers: dict[str, str]) -> None:
        self.status, self.reason, self.headers = status, reason, headers
