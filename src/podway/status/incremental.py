"""``DocumentBuilder``: the status document (``document``) kept up to date from state to state.

It keeps the last document and recomputes only the entries whose inputs changed — an object
added, replaced or removed in the snapshot, its problems, its translated status, whether an IR
part it originates changed, the rejections that touch it — found by identity (sources keep
unchanged objects, the translator keeps unchanged statuses, virtual hosts and pools), so one new
route at 10,000 costs the diffs of a few maps, not a rebuild. An entry whose inputs changed but
that comes out equal is kept as the same object. A document it builds says which entries differ
from the one before (``changed_since``), so its own readers (the status and event writers) can
work on the change alone. Invariant, tested by property: every document it builds equals
``build`` from scratch of the same inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from podway.base.mapdiff import MapDiff
from podway.ir import IR
from podway.ir.listener import Listener, VirtualHost
from podway.ir.pool import Pool
from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.model.loader import LoadError
from podway.model.snapshot import Key
from podway.pipeline import Rejection, State
from podway.status.diff import NONE, host_changes, pool_hint, problem_changes
from podway.status.document import (
    SERIALS,
    ObjectEntry,
    StatusDocument,
    object_entry,
    refused_objects,
)
from podway.translate import Problem, Result
from podway.translate.core.status import ObjectStatus

NOT_OWNED = "NotOwned"  # the reason of the problem that says "not Podway's object"


_Refs = tuple[ObjectRef, ...]


@dataclass(frozen=True, slots=True)
class _ListenerParts:
    """What one listener contributes (``served``, ``front``), kept by the identity of its parts:
    the listener-level refs, and each virtual host's route origins by virtual host."""

    listener: Listener  # holds the parts, so their ids stay theirs
    head: tuple[_Refs, _Refs]  # (served, front) of origins, L4 routes and certificates
    hosts: dict[int, VirtualHost]  # its virtual hosts by id


class DocumentBuilder:
    """Successive documents of one pipeline, each recomputing only what changed (module
    docstring). Not thread-safe; one per reader."""

    def __init__(self) -> None:
        self._doc: StatusDocument | None = None
        self._objects: dict[ObjectRef, ObjectEntry] = {}  # the last document's, never shared
        self._kinds: dict[str, MapDiff[Key]] = {}
        self._problems: tuple[Problem, ...] = ()
        self._by_object: dict[ObjectRef, tuple[Problem, ...]] = {}
        self._statuses: MapDiff[ObjectRef] = MapDiff()
        self._ir: IR | None = None
        self._listeners: dict[tuple[str, int], _ListenerParts] = {}
        self._pools: Mapping[str, Pool] = MappingProxyType({})
        self._pool_diff: MapDiff[str] = MapDiff()
        self._served: Counter[ObjectRef] = Counter()
        self._front: Counter[ObjectRef] = Counter()
        self._rejections: tuple[Rejection, ...] = ()
        self._refused: dict[ObjectRef, list[Rejection]] = {}

    def of_state(self, state: State) -> StatusDocument:
        update = state.update
        return self.build(snapshot=update.snapshot, result=state.result,
                          load_errors=update.errors, load_warnings=update.warnings,
                          stale_files=update.stale_files, rejections=state.rejections,
                          generation=state.generation, changed=update.changed)

    def build(self, *, snapshot: Snapshot, result: Result,
              load_errors: Iterable[LoadError] = (), load_warnings: Iterable[LoadError] = (),
              stale_files: Iterable[str] = (), rejections: Iterable[Rejection] = (),
              generation: int | None = None,
              changed: Iterable[tuple[str, Key]] | None = None) -> StatusDocument:
        """The document of these inputs (equal to ``build``'s), derived from the last one.

        ``changed``: the (kind, key) pairs that changed since the snapshot of the generation
        before (``SourceUpdate.changed``); it spares the snapshot diff when ``generation``
        follows the last document's, and is ignored otherwise.
        """
        rejections = tuple(rejections)
        dirty: set[ObjectRef] = set()
        last = self._doc.generation if self._doc is not None else None
        if changed is not None and generation is not None and last is not None \
                and generation == last + 1:
            dirty.update(ObjectRef(kind, *key) for kind, key in changed)
            for kind, per_kind in snapshot.objects.items():
                self._kinds.setdefault(kind, MapDiff()).rebase(per_kind)
            for kind in self._kinds.keys() - snapshot.objects.keys():
                del self._kinds[kind]
        else:
            self._snapshot_changes(snapshot, dirty)
        self._problem_changes(result.problems, dirty)
        self._status_changes(result.statuses, dirty)
        ir_changed = self._ir_changes(result, dirty)
        if rejections != self._rejections or (ir_changed and rejections):
            # Few, and mapped through the IR: recomputed whole, their objects redone.
            refused = refused_objects(result.ir, rejections)
            dirty.update(self._refused)
            dirty.update(refused)
            self._refused, self._rejections = refused, rejections
        before = self._doc
        objects = self._objects.copy()  # a dict's copy: no key is hashed again
        redone: set[ObjectRef] = set()
        in_snapshot = snapshot.objects
        for ref in dirty:
            problems = self._by_object.get(ref, ())
            status = result.statuses.get(ref)
            if not problems and status is None and (ref.namespace, ref.name) not in \
                    in_snapshot.get(ref.kind, NONE):
                if objects.pop(ref, None) is not None:
                    redone.add(ref)
                continue
            entry = object_entry(ref, snapshot, result.ir, problems=problems, status=status,
                                 mine=tuple(self._refused.get(ref, ())),
                                 served=self._served[ref] > 0, front=self._front[ref] > 0)
            old = objects.get(ref)
            if old is None or old != entry:
                objects[ref] = entry
                redone.add(ref)
        doc = StatusDocument(
            objects=MappingProxyType(objects), load_errors=tuple(load_errors),
            load_warnings=tuple(load_warnings), stale_files=tuple(stale_files),
            rejections=rejections, generation=generation, serial=next(SERIALS),
            basis=before.serial if before is not None else 0, changed=frozenset(redone))
        self._doc, self._objects = doc, objects
        return doc

    def _snapshot_changes(self, snapshot: Snapshot, dirty: set[ObjectRef]) -> None:
        """Objects added, replaced (by identity) or removed, kind by kind."""
        kinds = snapshot.objects
        for kind, objects in kinds.items():
            diff = self._kinds.setdefault(kind, MapDiff())
            dirty.update(ObjectRef(kind, *key) for key in diff.update(objects))
        for kind in self._kinds.keys() - kinds.keys():
            dirty.update(ObjectRef(kind, *key) for key in self._kinds.pop(kind).update({}))

    def _problem_changes(self, problems: tuple[Problem, ...], dirty: set[ObjectRef]) -> None:
        """Regroup the problems of the objects whose problems came or went (``problem_ids``:
        by identity, at C speed); every object's when that cannot be told."""
        if problems is self._problems:
            return
        found = problem_changes(self._problems, problems)
        if found is not None:
            position, added, removed = found
            refs: dict[ObjectRef, list[Problem]] = {}
            for problem in (*added, *removed):
                refs.setdefault(problem.ref, [])
            for problem in added:
                refs[problem.ref].append(problem)
            for ref, came in refs.items():
                mine = came + [p for p in self._by_object.get(ref, ()) if id(p) in position]
                now = tuple(sorted(mine, key=lambda p: position[id(p)]))
                if now != self._by_object.get(ref, ()):
                    dirty.add(ref)
                if now:
                    self._by_object[ref] = now
                else:
                    self._by_object.pop(ref, None)
            self._problems = problems
            return
        grouped: dict[ObjectRef, list[Problem]] = {}
        for problem in problems:
            grouped.setdefault(problem.ref, []).append(problem)
        by_object = {ref: tuple(found) for ref, found in grouped.items()}
        old = self._by_object
        dirty.update(ref for ref in old.keys() | by_object.keys()
                     if old.get(ref) != by_object.get(ref))
        self._problems, self._by_object = problems, by_object

    def _status_changes(self, statuses: Mapping[ObjectRef, ObjectStatus],
                        dirty: set[ObjectRef]) -> None:
        """Objects whose status object was added, replaced or removed (``MapDiff``)."""
        dirty.update(self._statuses.update(statuses))

    def _ir_changes(self, result: Result, dirty: set[ObjectRef]) -> bool:
        """Update the served/front counts from the IR parts that changed (by identity, or as
        the translator's ``IRChange`` says when it is relative to the IR seen last); the
        objects whose counts moved are dirty. False when the IR is the one seen last."""
        ir = result.ir
        if ir is self._ir:
            return False
        change = result.change if result.change is not None \
            and result.change.base is self._ir else None
        served, front = self._served, self._front
        touched: list[ObjectRef] = []

        def count(refs: Iterable[ObjectRef], into: Counter[ObjectRef], step: int) -> None:
            for ref in refs:
                into[ref] += step
                if into[ref] <= 0:
                    del into[ref]
                touched.append(ref)

        if self._ir is None or ir.listeners is not self._ir.listeners:
            seen: Counter[str] = Counter()
            parts: dict[tuple[str, int], _ListenerParts] = {}
            for listener in ir.listeners:
                key = (listener.name, seen[listener.name])
                seen[listener.name] += 1
                parts[key] = self._listener_parts(
                    listener, self._listeners.pop(key, None), count, served, front,
                    pairs=change.vhosts.get(listener.name) if change is not None else None)
            for gone in self._listeners.values():  # listeners no longer there
                count(gone.head[0], served, -1)
                count(gone.head[1], front, -1)
                for host in gone.hosts.values():
                    routes = [r.origin for r in host.routes]
                    count(routes, served, -1)
                    count(routes, front, -1)
            self._listeners = parts
        if self._ir is None or ir.pools is not self._ir.pools:
            old = self._pools
            for name in self._pool_diff.update(ir.pools, known=pool_hint(result)):
                was, pool = old.get(name), ir.pools.get(name)
                if was is not None and was.origin is not None:
                    count((was.origin,), served, -1)
                if pool is not None and pool.origin is not None:
                    count((pool.origin,), served, 1)
            self._pools = ir.pools
        self._ir = ir
        dirty.update(touched)
        return True

    @staticmethod
    def _listener_parts(listener: Listener, old: _ListenerParts | None,
                        count: Any, served: Counter[ObjectRef], front: Counter[ObjectRef], *,
                        pairs: Iterable[tuple[VirtualHost | None, VirtualHost | None]] | None
                        ) -> _ListenerParts:
        if old is not None and old.listener is listener:
            return old
        head = _head(listener)
        added: list[VirtualHost]
        removed: list[VirtualHost]
        if old is None:
            hosts = dict(zip(map(id, listener.virtual_hosts), listener.virtual_hosts,
                             strict=True))
            added, removed = list(hosts.values()), []
            old_head: tuple[_Refs, _Refs] = ((), ())
        else:
            old_head = old.head
            hosts, added, removed = host_changes(old.hosts, listener, pairs)
        if head != old_head:
            count(old_head[0], served, -1)
            count(old_head[1], front, -1)
            count(head[0], served, 1)
            count(head[1], front, 1)
        for step, group in ((-1, removed), (1, added)):
            for host in group:
                routes = [r.origin for r in host.routes]
                count(routes, served, step)
                count(routes, front, step)
        return _ListenerParts(listener=listener, head=head, hosts=hosts)


def _head(listener: Listener) -> tuple[_Refs, _Refs]:
    """(served, front) refs of a listener's own parts: its origins, L4 routes and certificates
    (route origins of its virtual hosts are counted per virtual host)."""
    l4 = tuple(r.origin for r in listener.l4_routes)
    certs = tuple(c.origin for c in listener.certificates if c.origin is not None)
    return (*listener.origins, *l4, *certs), (*listener.origins, *l4)
