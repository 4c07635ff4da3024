"""Kubernetes Events on the user's objects: Normal ``Synced``, a Warning per problem reason.

``changes`` is pure: it compares two status documents and says which events are due — a
Warning for each problem (or engine refusal, or object that does not parse) that is new on its
object, a Normal ``Synced`` when an object clients reach Podway through (a LoadBalancer
Service, an Ingress, a Gateway, a route: the entry's ``front``) becomes served cleanly. An
unchanged document gives no event, so a resync or an endpoint change never repeats one. It
compares only the entries the newer document says changed (``StatusDocument.changed_since``:
one new route costs one entry's comparison, not the cluster's).

``EventRecorder`` writes them as core/v1 Events and de-duplicates like client-go's correlator:
the same (object, type, reason, message) again counts up the existing Event (``count``,
``lastTimestamp``) instead of creating one; and each object has a token bucket (``burst``
events, one more every ``refill_s`` seconds), so a flapping object cannot flood the API.
Failures to write an Event are logged, never raised: events are best effort. At most
``concurrency`` writes are in flight (the first state of a large cluster makes one ``Synced``
per object: a thousand at once held a thousand requests' buffers). Writes go below the
generated client (``raw_request``) and their answers are not read, only their status.

Only the leader records (``podway.programs.controller.leader``): ``record`` takes the current
``Fence`` and every create or patch checks it right before it is sent; events due on a follower, or
after the Lease was lost, are dropped (counted in ``podway_controller_fenced_writes_total``). Events
due while no replica leads (a failover) are therefore not written — statuses are, by the next
leader.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from kubernetes_asyncio import client

from podway.kube.client import raw_request
from podway.kube.errors import Conflict, api_error
from podway.model.base import ObjectRef
from podway.model.kinds import BY_NAME
from podway.model.loader import LoadError
from podway.programs.controller.leader import ALWAYS, Fence, Leadership
from podway.programs.controller.metrics import ControllerMetrics
from podway.status import ObjectEntry, StatusDocument
from podway.translate import Severity

log = logging.getLogger(__name__)

COMPONENT = "podway-controller"


@dataclass(frozen=True, slots=True, kw_only=True)
class Due:
    """One event to record."""

    ref: ObjectRef
    type: str  # Normal | Warning
    reason: str
    message: str


def _warnings(entry: ObjectEntry | None) -> set[tuple[str, str]]:
    """(reason, message) of each Warning an entry calls for."""
    if entry is None or not entry.owned:
        return set()
    found = {(str(p.reason), p.message) for p in entry.problems
             if p.severity is not Severity.INFO}  # info: nothing wrong, no Warning
    found |= {("EngineRejected", f"engine {r.node} refused {r.type_name} {r.resource}: "
                                 f"{r.message}") for r in entry.rejections}
    return found


def _synced(entry: ObjectEntry | None) -> bool:
    """A front (clients reach Podway through it) served cleanly."""
    return entry is not None and entry.front and entry.owned and entry.accepted \
        and not entry.rejections and all(p.severity is Severity.INFO for p in entry.problems)


def changes(before: StatusDocument | None, after: StatusDocument) -> list[Due]:
    """The events due between two documents (see the module docstring): only the entries
    ``after`` says changed since ``before`` are compared (every entry when it cannot say)."""
    refs = after.changed_since(before)
    if refs is None:
        refs = frozenset(after.objects.keys() | (before.objects.keys() if before else ()))
    warnings: list[Due] = []
    synced: list[Due] = []
    for ref in sorted(refs):
        old = before.objects.get(ref) if before is not None else None
        new = after.objects.get(ref)
        if old is new:
            continue
        warnings += [Due(ref=ref, type="Warning", reason=reason, message=message)
                     for reason, message in sorted(_warnings(new) - _warnings(old))]
        if _synced(new) and not _synced(old):
            synced.append(Due(ref=ref, type="Normal", reason="Synced", message="served by Podway"))
    return warnings + synced


def drop_told(due: list[Due], found_current: set[tuple[str, tuple[str, str]]]) -> list[Due]:
    """A process's first events without the ``Synced`` of objects whose status the API held
    as wanted already (``StatusWriter.found_current``): an earlier controller served them and
    said so; counting those up on a restart cost three API calls per object, for no news."""
    return [d for d in due if d.reason != "Synced"
            or (d.ref.kind, (d.ref.namespace, d.ref.name)) not in found_current]


def load_error_events(before: Iterable[LoadError], after: Iterable[LoadError]) -> list[Due]:
    """A Warning ``InvalidObject`` for each object that newly fails to parse."""
    out = []
    for error in sorted(set(after) - set(before), key=str):
        parts = error.object.split("/")
        if len(parts) == 3:
            ref = ObjectRef(*parts)
        elif len(parts) == 2:
            ref = ObjectRef(parts[0], "", parts[1])
        else:
            continue
        at = f" ({error.field})" if error.field else ""
        out.append(Due(ref=ref, type="Warning", reason="InvalidObject",
                       message=f"{error.message}{at}"))
    return out


class EventRecorder:
    """Writes due events, de-duplicated and rate-limited per object."""

    def __init__(self, api: client.ApiClient, *, namespace_of_cluster_objects: str = "default",
                 burst: int = 25, refill_s: float = 300.0,
                 clock: Callable[[], float] | None = None,
                 metrics: ControllerMetrics | None = None, concurrency: int = 16,
                 leadership: Leadership = ALWAYS) -> None:
        self._api = api
        self._core: Any = client.CoreV1Api(api)  # stubs: no ``_content_type``, typed bodies
        self._cluster_ns = namespace_of_cluster_objects
        self._burst = burst
        self._refill_s = refill_s
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        self._buckets: dict[ObjectRef, tuple[float, float]] = {}  # tokens, at
        self._sent: dict[tuple[ObjectRef, str, str, str], tuple[str, int]] = {}  # name, count
        self.dropped = 0
        self._metrics = metrics or ControllerMetrics()
        self._limit = asyncio.Semaphore(concurrency)
        self._leadership = leadership

    def resync(self) -> None:
        """Forget the counts this replica wrote (a new leader: another may have counted up
        since); an event due again is then read back and counted up from the API's count."""
        self._sent.clear()

    def _permit(self, fence: Fence) -> bool:
        if fence.valid():
            return True
        self._metrics.fenced_writes.labels(writer="event").inc()
        return False

    def _allow(self, ref: ObjectRef) -> bool:
        now = self._clock()
        tokens, at = self._buckets.get(ref, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - at) / self._refill_s)
        if tokens < 1:
            self._buckets[ref] = (tokens, now)
            return False
        self._buckets[ref] = (tokens - 1, now)
        return True

    async def record(self, due: Iterable[Due]) -> None:
        """Write ``due``: different events concurrently, repeats of one event in order (so
        the second counts up what the first created)."""
        fence = self._leadership.fence()
        groups: dict[tuple[ObjectRef, str, str, str], list[Due]] = {}
        for item in due:
            groups.setdefault((item.ref, item.type, item.reason, item.message), []).append(item)
        await asyncio.gather(*(self._in_order(group, fence) for group in groups.values()))

    async def _in_order(self, group: list[Due], fence: Fence) -> None:
        for item in group:
            async with self._limit:
                await self._one(item, fence)

    async def _one(self, due: Due, fence: Fence) -> None:
        if not self._permit(fence):
            return
        if not self._allow(due.ref):
            self.dropped += 1
            return
        key = (due.ref, due.type, due.reason, due.message)
        namespace = due.ref.namespace or self._cluster_ns
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            if key in self._sent:  # this run wrote it: count up
                name, count = self._sent[key]
                self._sent[key] = (name, count + 1)
                await self._count_up(name, namespace, count + 1, stamp)
            else:
                name = _event_name(due)
                self._sent[key] = (name, 1)
                try:
                    await self._write("POST", f"/api/v1/namespaces/{quote(namespace, safe='')}"
                                      "/events", _event_body(due, name=name,
                                                             namespace=namespace, stamp=stamp))
                except Conflict:
                    # Written before (a previous run of the controller): count it up.
                    existing = await _raw(self._core.read_namespaced_event(
                        name, namespace, _preload_content=False))
                    count = int(existing.get("count") or 1) + 1
                    if not self._permit(fence):
                        self._sent.pop(key, None)
                        return
                    await self._count_up(name, namespace, count, stamp)
                    self._sent[key] = (name, count)
                except Exception:
                    self._sent.pop(key, None)
                    raise
            self._metrics.events.labels(type=due.type, reason=due.reason).inc()
        except Exception as exc:  # best effort: an event never stops the controller
            log.warning("event %s %s on %s not written: %s", due.type, due.reason, due.ref,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    async def _count_up(self, name: str, namespace: str, count: int, stamp: str) -> None:
        await self._write(
            "PATCH",
            f"/api/v1/namespaces/{quote(namespace, safe='')}/events/{quote(name, safe='')}",
            {"count": count, "lastTimestamp": stamp}, "application/merge-patch+json")

    async def _write(self, method: str, path: str, body: dict[str, Any],
                     content_type: str = "application/json") -> None:
        """A write below the generated client (``raw_request``: a first state makes one
        event per object); its answer is not read, only its status (typed errors)."""
        try:
            resp = await raw_request(self._api, method, path, body=body,
                                     content_type=content_type)
        except client.exceptions.ApiException as exc:
            raise api_error(exc) from None
        await _status_only(resp)


async def _status_only(resp: Any) -> None:
    try:
        if resp.status >= 400:
            raise api_error(_Refused(resp.status, (await resp.text())[:200]))
    finally:
        resp.release()


async def _raw(call: Awaitable[Any]) -> dict[str, Any]:
    """The JSON body of a raw (``_preload_content=False``) call; typed errors by status."""
    try:
        resp = await call
    except client.exceptions.ApiException as exc:
        raise api_error(exc) from None
    try:
        if resp.status >= 400:
            raise api_error(_Refused(resp.status, (await resp.text())[:200]))
        body = await resp.json(content_type=None)
        return body if isinstance(body, dict) else {}
    finally:
        resp.release()


class _Refused:
    """A refused call in the shape ``api_error`` reads."""

    def __init__(self, status: int, reason: str) -> None:
        self.status, self.reason = status, reason


def _event_name(due: Due) -> str:
    digest = hashlib.sha256(f"{due.type}/{due.reason}/{due.message}".encode()).hexdigest()[:10]
    return f"{due.ref.name[:200]}.{digest}"


def _event_body(due: Due, *, name: str, namespace: str, stamp: str) -> dict[str, Any]:
    involved: dict[str, Any] = {"kind": due.ref.kind, "name": due.ref.name}
    if due.ref.namespace:
        involved["namespace"] = due.ref.namespace
    kind = BY_NAME.get(due.ref.kind)  # the table's version (a TLSRoute's is v1alpha2)
    if kind is not None:
        involved["apiVersion"] = kind.api_version()
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved, "type": due.type, "reason": due.reason,
            "message": due.message[:1024], "count": 1, "firstTimestamp": stamp,
            "lastTimestamp": stamp, "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": COMPONENT}
