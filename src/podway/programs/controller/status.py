"""The status writer: the status document, written back to the objects through the API.

``status_desired.desired`` is pure: from the status document (``podway.status``) of one
pipeline state it computes the ``status`` each object should carry — Gateway API conditions,
listeners with ``attachedRoutes`` and route parents exactly as the translator computed them
(engine refusals included: a refused listener is ``Programmed=False``), Service and Ingress
``status.loadBalancer.ingress`` (the VIP the listener binds, else ``--lb-address``).
``status_times.with_times`` then stamps conditions: a condition whose status did not change keeps
its ``lastTransitionTime`` (Kubernetes' rule), a new or flipped one gets ``now``. On routes, the
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
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.kube.client import raw_request
from podway.kube.errors import NotFound, api_error
from podway.model.snapshot import Key
from podway.pipeline import Pipeline, State
from podway.programs.controller.leader import ALWAYS, Fence, Leadership
from podway.programs.controller.metrics import ControllerMetrics
from podway.programs.controller.source import KindInfo
from podway.programs.controller.status_desired import Desired, Target
from podway.programs.controller.status_pools import POOL_KINDS
from podway.programs.controller.status_times import (
    Status,
    covers,
    now_rfc3339,
    same,
    with_times,
)
from podway.status import StatusDocument
from podway.status.incremental import DocumentBuilder
from podway.translate import TranslateOptions

log = logging.getLogger(__name__)

RETRY = Backoff(base=0.5, cap=30.0)  # rewrites after failed PATCHes


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
        self._concurrency = max(1, concurrency)
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
        # Statuses found as wanted in the API, not written by this process: an earlier
        # controller served these objects (the first document's ``Synced`` events skip them).
        # Collected until the controller takes it (``take_found``), then no more.
        self.found_current: set[Target] | None = set()
        self.on_written: Callable[[str, Key, str], None] = lambda kind, key, version: None
        """Told of each write's resourceVersion, so its watch event (our own write read
        back) costs no parse (set by the controller: ``KubeSource.expect_echo``)."""
        self.hold_first: Callable[[], Awaitable[object]] | None = None
        """Awaited once, by the first pass between its document and its PATCHes; later states
        wait for it (set by the controller: ``first_pass.until_served``)."""

    def take_found(self) -> set[Target]:
        """The statuses found current so far; from now on none are collected (only the first
        document's events need them)."""
        found, self.found_current = self.found_current or set(), None
        return found

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
                state.update.snapshot.objects.get("Ingress"),
                *(state.update.snapshot.objects.get(kind) for kind in POOL_KINDS))
        if _same_inputs(seen, self._seen):
            return 0  # members moved, nothing a status shows
        self._seen = seen
        doc = self._documents.of_state(state)
        self.last_document = doc
        self._pending |= self._desired.update(doc, state)
        hold, self.hold_first = self.hold_first, None
        if hold is not None:  # the first pass: the document now, its PATCHes after the hold
            await hold()
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
                if target not in self._written and self.found_current is not None:
                    self.found_current.add(target)
                self._written[target] = stamped
                self._wanted[target] = status
                continue
            todo.append((target, status, stamped))
        if todo:
            self.passes += 1
            await self._patch_all(todo, fence)
        return len(todo)

    async def _patch_all(self, todo: list[tuple[Target, Status, Status]], fence: Fence
                         ) -> None:
        """Every PATCH of a pass, ``concurrency`` in flight: that many workers each take the
        next one (not a task per PATCH, 10,000 of them waiting for their turn)."""
        queue = iter(todo)

        async def worker() -> None:
            for target, wanted, status in queue:
                await self._patch(target, wanted, status, fence)

        await asyncio.gather(*(worker() for _ in range(min(self._concurrency, len(todo)))))

    async def _patch(self, target: Target, wanted: Status, status: Status, fence: Fence
                     ) -> None:
        kind, (namespace, name) = target
        info = self._kind_info(kind)
        if info is None:
            return
        body = {"status": status}
        if not fence.valid():  # the Lease was lost while this pass waited: drop it
            self._metrics.fenced_writes.labels(writer="status").inc()
            return
        try:
            version = await patch_status(self._api, info, namespace, name, body)
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
        if version is not None:
            self.on_written(kind, (namespace, name), version)


def _same_inputs(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same inputs: problems and rejections (positions 1 and 2, small tuples) equal, every
    other part the very same object (identity, not ``id``: the id of a freed object can be
    reused; not equality: comparing two IRs is O(IR))."""
    return len(a) == len(b) and all(x is y or (i in (1, 2) and x == y)
                                     for i, (x, y) in enumerate(zip(a, b, strict=True)))


async def patch_status(api: client.ApiClient, info: KindInfo, namespace: str, name: str,
                       body: Mapping[str, Any]) -> str | None:
    """A JSON merge patch of the status subresource of one object (typed API errors); the
    resourceVersion the write made (None: the answer did not say). Sent below the generated
    client layer (``raw_request``): 10,000 of these are a large controller's first pass."""
    base = f"/api/{info.version}" if not info.group else f"/apis/{info.group}/{info.version}"
    where = f"/namespaces/{quote(namespace, safe='')}" if info.namespaced else ""
    path = f"{base}{where}/{info.plural}/{quote(name, safe='')}/status"
    try:
        resp = await raw_request(api, "PATCH", path, body=body,
                                 content_type="application/merge-patch+json")
    except client.exceptions.ApiException as exc:
        raise api_error(exc) from None
    try:
        if resp.status >= 400:  # a raw response (_preload_content=False) does not raise
            raise api_error(_Refused(resp.status, (await resp.text())[:200],
                                     dict(getattr(resp, "headers", None) or {})))
        return _version(await resp.read())
    finally:
        resp.release()


def _version(answer: bytes) -> str | None:
    try:
        meta = json.loads(answer).get("metadata")
    except (ValueError, AttributeError):
        return None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return version if isinstance(version, str) and version else None


class _Refused:
    """A refused PATCH in the shape ``api_error`` reads."""

    def __init__(self, status: int, reason: str, headers: dict[str, str]) -> None:
        self.status, self.reason, self.headers = status, reason, headers
