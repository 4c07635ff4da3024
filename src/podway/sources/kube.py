"""The Kubernetes API → snapshots: the controller's source (``Source`` protocol).

One shared informer (``podway.kube.informer``: list, watch with bookmarks, 410 → re-list,
jittered backoff honouring Retry-After) per kind in ``kube_kinds``. Their handlers only parse
and stage changes; ``watch`` turns staged changes into ``SourceUpdate``s.

Invariants:

* The first update is complete: it comes once every informer finished its first list
  (Gateway API kinds whose CRD exists at start included), with ``changed=None``.
* Later updates carry exactly the (kind, key) pairs whose typed object changed. Objects are
  compared by value after dropping what the translator never reads (resourceVersion,
  managedFields, for Pods everything but labels, node, IPs, phase, container ports, the
  NodePortLocal annotation and Podway's readiness gate with its condition), and an unchanged
  object keeps its identity in the snapshot: a Pod status flap that changes nothing Podway
  reads produces no update at all.
* Coalescing: an update goes out once changes have been quiet for ``debounce_s``, or
  ``max_wait_s`` after the first pending change, whichever is first, so constant churn cannot
  starve the pipeline and a burst costs one translation. Leading edge: a lone change waits
  only ``LEADING_S`` for the events that came with it (one API write is often several watch
  events), once ``debounce_s`` has passed since the last update (if less has, until it has:
  at most one leading edge per ``debounce_s``), so a lone change is never held back by a whole
  debounce; a change that arrives while one waits for its leading edge makes a burst, which
  coalesces as above. An event that changes nothing Podway reads (the controller's own status
  writes after every state) is dropped on arrival: it is not activity, so it neither opens
  nor prolongs a burst. The watch event of a version our own write made (``expect_echo``) is
  dropped before it is even parsed (not one from a list: see ``_echo``).
* A bad object (fails the typed model) is left out of the snapshot and reported in
  ``errors`` (a ``LoadError`` naming the object and field); it never stops the source or
  disturbs other objects. It leaves ``errors`` when fixed or deleted.
* Kinds defined by a CRD (every Gateway API kind, Podway's TrafficPolicy) are watched while
  their CRD exists, at its most stable served version; a kind whose CRD is missing is logged
  once and picked up when the CRD is created; deleting the CRD removes its objects from the
  snapshot.
* Serve what can be served: a list the API refuses (403 under a narrower ClusterRole, 404)
  blocks nothing for the kinds Podway can do without. When CustomResourceDefinitions cannot be
  listed, each CRD kind is probed by listing it directly (most stable version first): a kind
  that lists is watched, one that answers 404 at every version counts as not installed, one
  that is refused is reported. A refused CRD kind settles too. Both keep retrying in the
  background and are picked up once allowed. ``unavailable`` names what is refused and why
  (the controller logs it, counts it in a metric and puts it in an event on its
  GatewayClasses). Built-in kinds (Services, EndpointSlices, …) still wait for their first
  list: without them the first update would withdraw what the engines serve.
* One public hook for a consumer that needs more than the snapshot (the controller keeps the
  API's ``status`` of the objects it writes): ``on_raw(kind, event, raw)`` sees every event
  of a watched kind before it is trimmed and parsed, and may take fields out of ``raw``.
* Namespace filter (like AKO's): ``namespaces`` and/or a Namespace label selector; objects of
  other namespaces are dropped on arrival (never stored). When a Namespace starts or stops
  matching, every namespaced informer re-lists reporting all objects, so the snapshot gains
  or loses that namespace's objects. Cluster-scoped kinds are not filtered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from podway.base.backoff import Backoff
from podway.base.tasks import cancel_and_wait
from podway.kube import gateway_api
from podway.kube.errors import ApiError
from podway.kube.informer import RELIST, Informer, Raw
from podway.kube.selectors import label_selector
from podway.model.base import K8sObject
from podway.model.loader import LoadError, parse_object
from podway.model.snapshot import Key, Snapshot
from podway.sources import kube_kinds
from podway.sources.base import SourceUpdate
from podway.sources.echoes import Echoes
from podway.sources.kube_kinds import BUILTIN, CRDS, KindSpec, slim_crd, spec_of
from podway.sources.sharing import FieldsSetPool

log = logging.getLogger(__name__)

Ident = tuple[str, Key]  # (kind, (namespace, name))
RawTap = Callable[[str, str, Raw], None]  # (kind, event, raw object)

#: How long the first change after a quiet spell waits for events that came with it.
LEADING_S = 0.002
# A first list of more objects than this is shared (``sources.sharing``) after the first update
# is out, ``SHARE_CHUNK`` a loop turn: 0.3 s less before a cold start's first state at 30,000.
SHARE_LATER_OVER, SHARE_CHUNK = 2_000, 500
SOURCE = "kubernetes"  # LoadError.file for objects from the API
CRD_KIND = "CustomResourceDefinition"


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeSourceSettings:
    namespaces: tuple[str, ...] = ()  # only objects in these namespaces; empty: all
    namespace_selector: str = ""  # and only in Namespaces whose labels match; empty: all
    debounce_s: float = 0.05  # quiet time that closes a burst of changes
    max_wait_s: float = 0.5  # longest a change waits for the burst to end (no starvation)
    watch_timeout: int = 300  # server-side watch timeout (s); the watch resumes after it
    backoff: Backoff = RELIST  # re-list/re-watch delays after failures


class KubeSource:
    def __init__(self, api: client.ApiClient,
                 settings: KubeSourceSettings = KubeSourceSettings(), *,
                 on_raw: RawTap | None = None) -> None:
        self.settings = settings
        self._on_raw = on_raw
        self._core: Any = client.CoreV1Api(api)  # Any: raw responses (_preload_content)
        self._custom: Any = client.CustomObjectsApi(api)
        self._snapshot = Snapshot()
        self._pending: dict[Ident, K8sObject | None] = {}
        self._errors: dict[Ident, LoadError] = {}
        self._errors_dirty = False
        self._changed = asyncio.Event()
        self._informers: dict[str, Informer] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._crd_versions: dict[str, str] = {}  # kind -> version watched (CRD kinds)
        self._bundles = kube_kinds.Bundles()  # the Gateway API CRDs' bundle versions
        self._namespace_labels: dict[str, dict[str, str]] = {}
        self._selector = label_selector(settings.namespace_selector)
        self._announced_missing: set[str] = set()
        self._fields_sets = FieldsSetPool()  # one set per distinct shape (sources.sharing)
        self._unshared: list[K8sObject] = []  # a big first list's, until ``_share_later``
        self._last_update = float("-inf")  # loop time the last update went out
        # (kind, key) -> the resourceVersion our own write made (``expect_echo``).
        self._echoes = Echoes()

    # ---- the Source protocol ----------------------------------------------------------
    async def watch(self) -> AsyncIterator[SourceUpdate]:
        """The complete first update, then one per coalesced burst of changes, forever."""
        try:
            # Namespaces first; with a selector every other kind waits for the labels that
            # admit its objects. Then all lists at once: the API prepares one while we parse
            # another (the Gateway kinds start as their CRDs are seen).
            self._start(next(s for s in BUILTIN if s.kind == "Namespace"))
            if self.settings.namespace_selector:
                await self._first_list("Namespace").wait()
            self._start_crds()
            for spec in BUILTIN:
                if spec.kind != "Namespace":
                    self._start(spec)
            await self._all_ready()
            crds = self._informers[CRD_KIND]
            if not crds.ready.is_set():
                await self._probe_crd_kinds(crds.refused)
                await self._all_ready()
            for spec in CRDS:
                if spec.kind not in self._crd_versions:
                    self._announce_missing(spec)
            first = self._flush(first=True)
            assert first is not None
            self._last_update = asyncio.get_running_loop().time()
            yield first
            if self._unshared:  # the first state is out: now its objects' memory
                self._tasks["(sharing)"] = self._task(self._share_later(), name="kube-sharing")
            while True:
                await self._burst()
                update = self._flush(first=False)
                if update is not None:  # a burst of no-ops (our own status writes) is quiet
                    self._last_update = asyncio.get_running_loop().time()
                    yield update
        finally:
            await cancel_and_wait(*self._tasks.values())

    def watched_version(self, kind: str) -> str | None:
        """The API version ``kind`` is watched at now (None: not watched, e.g. no CRD)."""
        spec = spec_of(kind)
        if spec is None:
            return None
        return self._crd_versions.get(kind) if spec.crd else spec.version

    @property
    def unavailable(self) -> dict[str, str]:
        """Kinds the API refuses to list now (CustomResourceDefinition included) → why."""
        return {name: _why(informer.refused) for name, informer in sorted(self._informers.items())
                if informer.refused is not None}

    @property
    def queued(self) -> int:
        """Object changes staged for the next coalesced update."""
        return len(self._pending)

    @property
    def relists(self) -> int:
        """Re-lists after the first list, over all kinds (410s, broken watches, failures)."""
        return sum(i.relists for i in self._informers.values())

    # ---- coalescing -------------------------------------------------------------------
    async def _burst(self) -> None:
        """Return once a burst of changes ended (debounce) or ran too long (max wait); at
        once (``LEADING_S``) for a lone change, once ``debounce_s`` has passed since the last
        update (see the module docstring)."""
        await self._changed.wait()
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self.settings.max_wait_s
        window = self.settings.debounce_s
        opens = self._last_update + window  # the earliest leading edge: one per debounce
        if began < opens:
            # Soon after an update: a lone change waits only for the rest of the debounce
            # since that update (it waited the whole debounce from its arrival before:
            # bench/convergence's next route, 10-20 ms after the previous update, waited
            # 20 ms on an idle controller); another change meanwhile makes it a burst.
            self._changed.clear()
            try:  # not wait_for: on 3.11 it can swallow a cancellation that meets a wake-up
                async with asyncio.timeout(opens - began):
                    await self._changed.wait()
            except TimeoutError:  # still alone: the leading edge, now
                if opens - began >= LEADING_S:
                    return  # what came with it had its LEADING_S already
            else:
                await self._settle(deadline, window)
                return
        await self._settle(deadline, min(window, LEADING_S))

    async def _settle(self, deadline: float, window: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            quiet = min(window, deadline - loop.time())
            if quiet <= 0:
                return
            try:  # not wait_for: on 3.11 it loses a cancel that meets a change (podway.base.tasks)
                async with asyncio.timeout(quiet):
                    await self._changed.wait()
            except TimeoutError:
                return

    def _flush(self, *, first: bool) -> SourceUpdate | None:
        by_kind: dict[str, dict[Key, K8sObject | None]] = {}
        for (kind, key), obj in self._pending.items():
            current = self._snapshot.objects.get(kind, {}).get(key)
            if obj is None and current is None:
                continue
            if obj is not None and current is not None and obj == current:
                continue  # same content: keep the old object's identity, report nothing
            if obj is not None and first and len(self._pending) > SHARE_LATER_OVER:
                self._unshared.append(obj)
            elif obj is not None:
                self._fields_sets.share(obj)  # only objects the snapshot keeps (sharing)
            by_kind.setdefault(kind, {})[key] = obj
        self._pending.clear()
        for kind, changes in by_kind.items():
            self._snapshot = self._snapshot.replace(kind, changes)
        if self._bundles.dirty:
            self._snapshot = self._bundles.apply(self._snapshot, by_kind)
        changed = tuple((kind, key) for kind, changes in sorted(by_kind.items())
                        for key in sorted(changes))
        if not first and not changed and not self._errors_dirty:
            return None
        self._errors_dirty = False
        errors = tuple(self._errors[i] for i in sorted(self._errors))
        return SourceUpdate(self._snapshot, errors, (), None if first else changed)

    def expect_echo(self, kind: str, key: Key, version: str) -> None:
        """Our own write made ``version`` of an object: its watch event is not parsed."""
        self._echoes.expect((kind, key), version)

    @property
    def echoes(self) -> int:
        """Watch events of our own writes not parsed (``sources.echoes``)."""
        return self._echoes.dropped

    # ---- staging changes (handlers: synchronous and cheap) -----------------------------
    def _stage(self, ident: Ident, obj: K8sObject | None, error: LoadError | None) -> None:
        old = self._errors.pop(ident, None)
        if error is not None:
            self._errors[ident] = error
        if old != error:
            self._errors_dirty = True
        elif ident not in self._pending and self._unchanged(ident, obj):
            # A no-op (our own status write, a field Podway never reads): neither a change nor
            # activity. Staged, it would open or prolong a burst, and a real change arriving
            # in that burst would wait out the whole debounce instead of the leading edge.
            return
        self._pending[ident] = obj
        self._changed.set()

    def _unchanged(self, ident: Ident, obj: K8sObject | None) -> bool:
        """``obj`` is what the snapshot already holds for ``ident`` (as ``_flush`` judges)."""
        kind, key = ident
        current = self._snapshot.objects.get(kind, {}).get(key)
        if obj is None or current is None:
            return obj is None and current is None
        return obj == current

    def _admitted(self, namespace: str) -> bool:
        if self.settings.namespaces and namespace not in self.settings.namespaces:
            return False
        if not self.settings.namespace_selector:
            return True
        labels = self._namespace_labels.get(namespace)
        return labels is not None and self._selector({"metadata": {"labels": labels}})

    def _handler(self, spec: KindSpec, version: str) -> Callable[[str, Raw], None]:
        api_version = spec.api_version(version)

        def handle(event: str, raw: Raw) -> None:
            if self._on_raw is not None:
                self._on_raw(spec.kind, event, raw)
            meta = raw.get("metadata") or {}
            namespace = str(meta.get("namespace", "")) if spec.namespaced else ""
            ident = (spec.kind, (namespace, str(meta.get("name", ""))))
            informer = self._informers.get(spec.kind)
            if self._echoes.take(ident, event, meta.get("resourceVersion"),
                                 listing=informer is None or informer.listing):
                return  # our write (its status was taken by ``on_raw``): nothing new
            if spec.kind == "Namespace":
                self._namespace_event(event, raw)
            if event == "DELETED" or (spec.namespaced and not self._admitted(namespace)):
                self._stage(ident, None, None)
                return
            meta.pop("resourceVersion", None)  # moves on every write; nothing reads it
            raw["apiVersion"], raw["kind"] = api_version, spec.kind
            obj, error = parse_object(raw, source=SOURCE, document=-1)
            if error is not None:
                log.warning("object left out: %s", error)
            self._stage(ident, obj, error)
        return handle

    def _namespace_event(self, event: str, raw: Raw) -> None:
        meta = raw.get("metadata") or {}
        name = str(meta.get("name", ""))
        before = self._admitted(name)
        if event == "DELETED":
            self._namespace_labels.pop(name, None)
        else:
            self._namespace_labels[name] = dict(meta.get("labels") or {})
        if self._admitted(name) != before and self.settings.namespace_selector:
            log.info("namespace %s %s the filter: re-listing", name,
                     "entered" if not before else "left")
            self._relist_namespaced()

    def _relist_namespaced(self) -> None:
        for name, informer in list(self._informers.items()):
            spec = spec_of(name)
            if spec is not None and spec.namespaced and name in self._tasks:
                informer.report_all_on_next_list()
                self._tasks.pop(name).cancel()
                self._run(name, informer)

    # ---- informers --------------------------------------------------------------------
    def _lister(self, spec: KindSpec, version: str) -> tuple[Callable[..., Any], dict[str, Any]]:
        params: dict[str, Any] = {}
        if spec.field_selector:
            params["field_selector"] = spec.field_selector
        if spec.group == "":
            lister = f"list_{kube_kinds.snake(spec.kind)}"
            if spec.namespaced:
                return getattr(self._core, f"{lister}_for_all_namespaces"), params
            return getattr(self._core, lister), params
        params |= {"group": spec.group, "version": version, "plural": spec.plural}
        return self._custom.list_cluster_custom_object, params

    def _start(self, spec: KindSpec, version: str | None = None) -> None:
        version = version or spec.version
        lister, params = self._lister(spec, version)
        informer = Informer(name=spec.kind, lister=lister, params=params,
                            handler=self._handler(spec, version), transform=spec.transform,
                            watch_timeout=self.settings.watch_timeout,
                            backoff=self.settings.backoff)
        self._informers[spec.kind] = informer
        self._run(spec.kind, informer)

    def _run(self, name: str, informer: Informer) -> None:
        self._tasks[name] = self._task(informer.run(), name=f"kube-informer-{name}")

    async def _share_later(self) -> None:
        """Share a big first list's objects, ``SHARE_CHUNK`` a loop turn (``SHARE_LATER_OVER``)."""
        for start in range(0, len(self._unshared), SHARE_CHUNK):
            for obj in self._unshared[start:start + SHARE_CHUNK]:
                self._fields_sets.share(obj)
            await asyncio.sleep(0)
        self._unshared = []

    def _task(self, coro: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        task.add_done_callback(_log_failure)
        return task

    async def _all_ready(self) -> None:
        """Until every informer listed once; a CRD kind (or the CRDs) refused counts too."""
        while True:
            pending = [self._first_list(name).wait() for name in self._informers
                       if not self._first_list(name).is_set()]
            if not pending:
                return
            await asyncio.gather(*pending)

    def _first_list(self, name: str) -> asyncio.Event:
        informer = self._informers[name]
        spec = spec_of(name)
        optional = name == CRD_KIND or (spec is not None and spec.crd)
        return informer.settled if optional else informer.ready

    def _stop(self, kind: str) -> None:
        task = self._tasks.pop(kind, None)
        if task is not None:
            task.cancel()
        self._informers.pop(kind, None)

    # ---- CRD-defined kinds (Gateway API, TrafficPolicy) --------------------------------
    def _start_crds(self) -> None:
        informer = Informer(
            name=CRD_KIND, params={}, handler=self._crd_event,
            lister=client.ApiextensionsV1Api(self._core.api_client
                                             ).list_custom_resource_definition,
            transform=slim_crd, watch_timeout=self.settings.watch_timeout,
            backoff=self.settings.backoff)
        self._informers[CRD_KIND] = informer
        self._run(CRD_KIND, informer)

    def _crd_event(self, event: str, raw: Raw) -> None:
        if self._bundles.note(event, raw):
            self._changed.set()
        name = str((raw.get("metadata") or {}).get("name", ""))
        spec = next((s for s in CRDS if s.crd_name == name), None)
        if spec is None:
            return
        served = [] if event == "DELETED" else [
            str(v["name"]) for v in (raw.get("spec") or {}).get("versions", []) if v.get("served")]
        version = gateway_api.preferred(served)
        if version == self._crd_versions.get(spec.kind):
            return
        if spec.kind in self._crd_versions:
            self._stop(spec.kind)
            self._crd_versions.pop(spec.kind)
            for key in self._known_keys(spec.kind):
                self._stage((spec.kind, key), None, None)
        if version is None:
            log.warning("%s CRD removed: its objects are dropped", spec.kind)
            self._announced_missing.discard(spec.kind)
            return
        if spec.kind in self._announced_missing:
            log.info("%s CRD installed (%s): watching it now", spec.kind, version)
        self._crd_versions[spec.kind] = version
        self._start(spec, version)

    async def _probe_crd_kinds(self, refused: ApiError | None) -> None:
        """CRDs cannot be listed: find each CRD kind by listing it (see the module docstring).
        A kind the CRD informer found meanwhile is left to it."""
        log.error("cannot list CustomResourceDefinitions (%s): looking for the Gateway API and "
                  "TrafficPolicy kinds directly; grant list/watch on "
                  "apiextensions.k8s.io/customresourcedefinitions to follow CRD changes",
                  _why(refused))
        for spec in CRDS:
            version, refusal = await self._probe(spec)
            if spec.kind in self._crd_versions:
                continue
            if version is None and refusal is None:
                self._announce_missing(spec)
                continue
            chosen = version or refusal
            assert chosen is not None
            self._crd_versions[spec.kind] = chosen
            self._start(spec, chosen)

    async def _probe(self, spec: KindSpec) -> tuple[str | None, str | None]:
        """(a version that lists, the most stable version that was refused)."""
        refusal = None
        for version in kube_kinds.served_versions(spec):
            lister, params = self._lister(spec, version)
            try:
                resp = await lister(**params, limit=1, _preload_content=False,
                                    _request_timeout=aiohttp.ClientTimeout(total=30, connect=10))
                status = int(resp.status)
                resp.release()
            except ApiException as exc:
                status = int(exc.status or 0)
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("probing %s/%s: %r", spec.kind, version, exc)
                status = 0
            if status == 200:
                return version, None
            if status != 404 and refusal is None:
                refusal = version  # refused or failing: its informer retries and reports it
        return None, refusal

    def _known_keys(self, kind: str) -> set[Key]:
        keys = set(self._snapshot.objects.get(kind, {}))
        keys |= {key for (k, key) in self._pending if k == kind}
        keys |= {key for (k, key) in self._errors if k == kind}
        return keys

    def _announce_missing(self, spec: KindSpec) -> None:
        if spec.kind not in self._announced_missing:
            self._announced_missing.add(spec.kind)
            log.info("%s is not installed (no CRD %s): it will be watched once the CRD is "
                     "created", spec.kind, spec.crd_name)


def _why(error: ApiError | None) -> str:
    return "refused" if error is None else error.in_short  # the full text: informer log


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s failed: %r", task.get_name(), task.exception())
