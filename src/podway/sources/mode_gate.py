"""The mode gate: each Service's *effective* backend mode, switched live and make-before-break.

A Service's *requested* mode is its ``podway.io/backend-mode`` annotation, else the default
(``--backend-mode``, replaced live by ``set_default``: the controller's ``--config`` file's
``backendMode``). The mode the translator uses — the *effective* one — follows it at once, except
when switching to ``nodeportlocal`` before the new members exist: until every ready pod behind the
Service has its NodePortLocal entry for the Service's target ports, the Service keeps its previous
effective mode, so traffic never meets an empty pool. The switch is then one EDS update (members
swapped, listeners and routes untouched), which Envoy applies without dropping requests. A Service
seen for the first time (no previous mode) takes the requested mode at once.

``ModeGate`` wraps any ``Source`` and applies that rule to each update. Where the effective mode
differs from the one the translator would read (the annotation, else the translator's own
default, fixed at start), it tells the translator so with a typed input, the snapshot's
``backend_modes`` side-table (a decision that needs the world enters the translator as input,
never as I/O inside it); the user's annotation is never rewritten. Such a Service is handed on as
a new object (an equal copy) whenever its entry comes, changes or goes, so the translator's
identity-keyed memos see a change exactly as for an edit. So a new default needs no new
translator: the gate re-applies the last update, every Service without an annotation is a
candidate, and the switch is the same make-before-break per-Service EDS change as an annotation
edit. Copies are kept per Service (reused while the source's object and the mode stay), so an
update costs O(Services it concerns); the Services it hands on are the very map it handed on last
when no Service and no copy moved (readers skip it by identity), else that map copied at C speed
with only the moved ones put again — never a Python pass over every Service, also while every
Service carries an entry (after a new default). It also reports *pending members*: pods behind a
Service in effective ``nodeportlocal`` mode whose NodePortLocal entry is not there yet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from podway.base.tasks import cancel_and_wait
from podway.model import EndpointSlice, Pod, Service, Snapshot, npl
from podway.model.snapshot import NO_MODES, Key
from podway.sources.base import Source, SourceUpdate
from podway.translate import BackendMode, TranslateOptions
from podway.translate.pools.backends import service_mode
from podway.translate.pools.members import EndpointIndex


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeReport:
    """What the gate decided for the last update."""

    held: Mapping[Key, tuple[BackendMode, BackendMode]]  # service → (effective, requested)
    pending: Mapping[Key, tuple[str, ...]]  # service → pods without their NPL entry yet


class ModeGate:
    """A ``Source`` around a ``Source``: the effective backend mode per Service (see above)."""

    def __init__(self, inner: Source, opts: TranslateOptions) -> None:
        self._inner = inner
        self._translated = opts  # what the translator reads: its default never changes
        self._opts = opts  # the live default (``set_default``)
        self._index = EndpointIndex()
        self._effective: dict[Key, BackendMode] = {}
        # service → (the source's object, the mode decided for it, the copy handed on)
        self._rewrites: dict[Key, tuple[Service, BackendMode, Service]] = {}
        self._decided: Mapping[Key, str] = NO_MODES  # handed on as ``Snapshot.backend_modes``
        self._last: SourceUpdate | None = None
        self._everything = False  # the next apply looks at every Service
        # (the source's Services, the map handed on with the copies in): kept while neither
        # changes, so an update that moves no Service hands on the very same map
        self._handed: tuple[Mapping[Key, Service], Mapping[Key, Service]] | None = None
        self._recopied: set[Key] = set()  # Services whose copy came, changed or went
        self._kick = asyncio.Event()
        self.report = ModeReport(held=MappingProxyType({}), pending=MappingProxyType({}))

    @property
    def default(self) -> BackendMode:
        """The default mode now (a Service without the annotation requests it)."""
        return self._opts.mode

    def set_default(self, mode: BackendMode) -> None:
        """Make ``mode`` the default from now on: ``watch`` re-applies the last update at once
        (make-before-break per Service, exactly like an annotation edit)."""
        if mode is self._opts.mode:
            return
        self._opts = replace(self._opts, mode=mode)
        self._everything = True
        self._kick.set()

    async def watch(self) -> AsyncIterator[SourceUpdate]:
        updates = aiter(self._inner.watch())
        following: asyncio.Future[SourceUpdate] = asyncio.ensure_future(anext(updates))
        try:
            while True:
                kicked: asyncio.Future[Any] = asyncio.ensure_future(self._kick.wait())
                waiting: set[asyncio.Future[Any]] = {following, kicked}
                try:
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    kicked.cancel()
                if following.done():
                    try:
                        update = following.result()
                    except StopAsyncIteration:
                        return
                    following = asyncio.ensure_future(anext(updates))
                    self._kick.clear()  # this update looks at everything due anyway
                    self._last = update
                    yield self.apply(update)
                elif self._kick.is_set():
                    self._kick.clear()
                    if self._last is not None:
                        last = self._last
                        yield self.apply(SourceUpdate(snapshot=last.snapshot, errors=last.errors,
                                                      stale_files=last.stale_files, changed=()))
        finally:
            await cancel_and_wait(following)
            with contextlib.suppress(RuntimeError):  # already closed by the cancellation
                await updates.aclose()  # type: ignore[attr-defined]

    def requested(self, service: Service) -> BackendMode:
        """The mode ``service`` asks for: its annotation, else the live default (a copy the
        gate handed on carries the user's annotation unchanged)."""
        return service_mode(service, self._opts)

    def apply(self, update: SourceUpdate) -> SourceUpdate:
        """The update with the effective mode of each Service where the translator would read
        another, in ``snapshot.backend_modes`` (those Services handed on as new objects).

        Only the Services an update can concern are looked at again: those it changed, those
        behind the EndpointSlices and Pods it changed, and those held or pending before; a
        first update (``changed`` None) or a new default looks at every Service.
        """
        snapshot = update.snapshot
        services = snapshot.kind(Service)
        candidates = self._candidates(update)
        held = dict(self.report.held)
        pending = dict(self.report.pending)
        before = {key: _mode_of(self._rewrites.get(key)) for key in candidates}
        for key in candidates:
            held.pop(key, None)
            pending.pop(key, None)
            service = services.get(key)
            if service is None:
                self._effective.pop(key, None)
                if self._rewrites.pop(key, None) is not None:
                    self._recopied.add(key)
                continue
            requested = service_mode(service, self._opts)
            previous = self._effective.get(key)
            waiting = (_pending_pods(service, snapshot, self._index)
                       if requested is BackendMode.NODEPORTLOCAL else ())
            effective = requested
            if waiting and previous is not None and previous is not requested:
                held[key] = (previous, requested)
                effective = previous
            else:
                self._effective[key] = requested
                if waiting:
                    pending[key] = waiting
            self._rewrite(key, service, effective)
        moved = [key for key in candidates
                 if key in services and before[key] is not _mode_of(self._rewrites.get(key))]
        self.report = ModeReport(held=MappingProxyType(held), pending=MappingProxyType(pending))
        recopied, self._recopied = self._recopied, set()
        if recopied:
            self._decided = MappingProxyType(
                {key: mode for key, (_, mode, _) in self._rewrites.items()}
            ) if self._rewrites else NO_MODES
        if not self._rewrites:
            self._handed = None
            if update.changed is not None and not moved:
                return update
        changed = update.changed
        if changed is not None:
            extra = [(Service.KIND, key) for key in sorted(moved)]
            changed = tuple(dict.fromkeys((*changed, *extra)))
        if self._rewrites:
            snapshot = Snapshot({**snapshot.objects, Service.KIND: self._hand_on(
                services, update.changed, recopied)}, self._decided,
                snapshot.gateway_api_bundles)
        return SourceUpdate(snapshot=snapshot, errors=update.errors,
                            stale_files=update.stale_files, changed=changed)

    def _hand_on(self, services: Mapping[Key, Service],
                 changed: Iterable[tuple[str, Key]] | None, recopied: set[Key]
                 ) -> Mapping[Key, Service]:
        """The Services with the copies in: the last map handed on again when neither the
        source's Services nor a copy changed, else that map with only the Services changed
        put again (one copy of the map, at C speed); a first or unknown update: all of it."""
        handed = self._handed
        if handed is not None and changed is not None:
            base, before = handed
            keys = set(recopied)
            if services is not base:
                keys.update(key for kind, key in changed if kind == Service.KIND)
            if not keys:
                self._handed = (services, before)
                return before
            out = dict(before)
            for key in keys:
                rewrite = self._rewrites.get(key)
                found = rewrite[2] if rewrite is not None else services.get(key)
                if found is None:
                    out.pop(key, None)
                else:
                    out[key] = found
        else:
            out = {**services, **{key: copy for key, (_, _, copy) in self._rewrites.items()}}
        merged = MappingProxyType(out)
        self._handed = (services, merged)
        return merged

    def _rewrite(self, key: Key, service: Service, effective: BackendMode) -> None:
        """Keep (or drop) the entry that tells the translator ``effective`` for ``service``, and
        the copy of ``service`` handed on with it (equal to the source's object: a new identity,
        so the translator sees the Service change)."""
        if effective is service_mode(service, self._translated):
            if self._rewrites.pop(key, None) is not None:
                self._recopied.add(key)
            return
        known = self._rewrites.get(key)
        if known is None or known[0] is not service or known[1] is not effective:
            self._rewrites[key] = (service, effective, service.model_copy())
            self._recopied.add(key)

    def _candidates(self, update: SourceUpdate) -> set[Key]:
        """Services whose effective mode or pending pods this update may move (see ``apply``);
        keeps the endpoint index up to date on the way."""
        snapshot = update.snapshot
        slices = snapshot.kind(EndpointSlice)
        if update.changed is None:
            self._index = EndpointIndex(slices.values())
        if update.changed is None or self._everything:
            self._everything = False
            return set(snapshot.kind(Service)) | set(self._effective)
        out = set(self.report.held) | set(self.report.pending)
        for kind, key in update.changed:
            if kind == Service.KIND:
                out.add(key)
            elif kind == EndpointSlice.KIND:
                item = slices.get(key)
                old = self._index.put(key, item)
                if old is not None:
                    out.add(old)
                if item is not None and item.service_name:
                    out.add((item.metadata.namespace, item.service_name))
            elif kind == Pod.KIND:
                out.update(self._index.services_of_pod(key))
        return out


def _mode_of(rewrite: tuple[Service, BackendMode, Service] | None) -> BackendMode | None:
    return None if rewrite is None else rewrite[1]


def _pending_pods(service: Service, snapshot: Snapshot, index: EndpointIndex
                  ) -> tuple[str, ...]:
    """Ready pods behind ``service`` lacking an NPL entry for a port their slices serve."""
    out: set[str] = set()
    for item in index.slices(service.key).values():
        ports = {(p.port, p.protocol.lower()) for p in item.ports if p.port is not None}
        for endpoint in item.endpoints:
            ref = endpoint.target_ref
            if ref is None or (ref.kind or "Pod") != "Pod" or endpoint.conditions.ready is False:
                continue
            namespace = ref.namespace or service.metadata.namespace
            pod = snapshot.get(Pod, namespace, ref.name)
            entries = set() if pod is None else {
                (e.pod_port, e.protocol)
                for e in npl.decode(pod.metadata.annotations.get(npl.ANNOTATION))[0]}
            if not ports <= entries:
                out.add(ref.name)
    return tuple(sorted(out))
