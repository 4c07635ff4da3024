"""The one status document: what Podway makes of every object, for files, tests and the API.

``build`` takes a snapshot, its translation, the source's load errors and stale files, and what
engines refuse (``Rejection`` records: decisions of the world, taken as inputs, never fetched
here) and returns a ``StatusDocument``. ``run --status-file``, ``validate --status-file``, the
golden tests and the Kubernetes status writer all read this one document, so they cannot
disagree.

What ``accepted`` means (docs/run.md):

* Objects with a Gateway API status (GatewayClass, Gateway, the routes, BackendTLSPolicy):
  exactly what the API status says — the object's ``Accepted`` condition, or for routes and
  policies ``Accepted`` on at least one parent. An HTTPRoute with one bad backendRef is
  ``Accepted=True`` with ``ResolvedRefs=False``, and ``accepted: true`` in the file.
* Every other kind (Ingress, Service, Secret, …) has no ``Accepted`` condition: it is accepted
  when nothing is wrong with it (no error-level problem), or when at least part of it is served
  (an IR node originates from it) despite its errors; and not when an engine refuses a resource
  made from it.
* An object Podway does not take (an Ingress of another class, …: a ``NotOwned`` problem) is
  ``owned: false`` with the reason, and not accepted; it is not an error.

Engine refusals land on their objects: a refused listener, route table, secret, cluster or load
assignment is mapped back through the IR (``origins``/``origin``) to the objects it came from;
those list it under ``engine_rejections``, and a Gateway whose listener is refused shows
``Programmed=False`` (on the Gateway and on the listeners of that port), in the file and in the
API status alike. Invariant: the document is a pure function of its inputs (``to_data`` adds a
timestamp only when asked).

Readers that follow a pipeline use ``DocumentBuilder``: it keeps the last document and recomputes
only the entries whose inputs changed — an object added, replaced or removed in the snapshot, its
problems, its translated status, whether an IR part it originates changed, the rejections that
touch it — found by identity (sources keep unchanged objects, the translator keeps unchanged
statuses, virtual hosts and pools), so one new route at 10,000 costs the diffs of a few maps,
not a rebuild. An entry whose inputs changed but that comes out equal is kept as the same object.
A document it builds says which entries differ from the one before (``changed_since``), so its
own readers (the status and event writers) can work on the change alone. Invariant, tested by
property: every document it builds equals ``build`` from scratch of the same inputs.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from podway.envoy import types
from podway.ir import IR
from podway.ir.listener import Listener, VirtualHost
from podway.ir.pool import Pool
from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.model.gateway import Gateway
from podway.model.loader import LoadError
from podway.model.snapshot import Key
from podway.pipeline import Rejection, State
from podway.translate import Problem, Result, Severity
from podway.translate.core.status import Condition, ObjectStatus, to_api

NOT_OWNED = "NotOwned"  # the reason of the problem that says "not Podway's object"
# Kinds whose ``accepted`` is read from their Gateway API status.
_API_KINDS = frozenset({"GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute",
                        "TCPRoute", "UDPRoute", "BackendTLSPolicy", "BackendLBPolicy",
                        "TrafficPolicy"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectEntry:
    ref: ObjectRef
    accepted: bool
    owned: bool = True
    not_owned_reason: str = ""  # the NotOwned problem's message
    problems: tuple[Problem, ...] = ()
    status: ObjectStatus | None = None  # Gateway API kinds, engine refusals applied
    rejections: tuple[Rejection, ...] = ()
    front: bool = False  # clients reach Podway through it: a listener's or a route's origin


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusDocument:
    objects: Mapping[ObjectRef, ObjectEntry]
    load_errors: tuple[LoadError, ...] = ()
    load_warnings: tuple[LoadError, ...] = ()  # documents skipped (unknown kinds), served anyway
    stale_files: tuple[str, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    generation: int | None = None
    # Lineage (not content): this document's serial, the serial of the document it was derived
    # from by a ``DocumentBuilder`` (0: none) and the objects whose entries differ from that one.
    serial: int = field(default=0, compare=False, repr=False)
    basis: int = field(default=0, compare=False, repr=False)
    changed: frozenset[ObjectRef] = field(default=frozenset(), compare=False, repr=False)

    def changed_since(self, before: StatusDocument | None) -> frozenset[ObjectRef] | None:
        """The objects whose entries may differ from ``before``'s (added, removed or changed);
        None when this document does not know (compare every entry)."""
        if before is self:
            return frozenset()
        if before is not None and self.basis and before.serial == self.basis:
            return self.changed
        return None

    @property
    def not_owned(self) -> tuple[ObjectEntry, ...]:
        return tuple(e for e in self.objects.values() if not e.owned)

    @property
    def statuses(self) -> Mapping[ObjectRef, ObjectStatus]:
        """The API status of each object that has one (what a Kubernetes writer patches)."""
        return MappingProxyType({ref: e.status for ref, e in self.objects.items()
                                 if e.status is not None})

    def to_data(self, *, updated: datetime | None = None) -> dict[str, Any]:
        """Plain data (the status file's YAML, see docs/run.md)."""
        out: dict[str, Any] = {}
        if updated is not None:
            out["updated"] = updated.isoformat(timespec="seconds")
        if self.generation is not None:
            out["generation"] = self.generation
        out["objects"] = {str(ref): _entry_data(self.objects[ref]) for ref in sorted(self.objects)}
        out["load_errors"] = [str(e) for e in self.load_errors]
        out["load_warnings"] = [str(w) for w in self.load_warnings]
        out["stale_files"] = list(self.stale_files)
        refs = _refs_by_rejection(self.objects)
        out["engine_rejections"] = [
            {**_rejection_data(r), "objects": [str(o) for o in refs.get(r, ())]}
            for r in self.rejections]
        return out


def of_state(state: State) -> StatusDocument:
    """The document of one pipeline state."""
    update = state.update
    return build(snapshot=update.snapshot, result=state.result, load_errors=update.errors,
                 load_warnings=update.warnings,
                 stale_files=update.stale_files, rejections=state.rejections,
                 generation=state.generation)


def build(*, snapshot: Snapshot, result: Result, load_errors: Iterable[LoadError] = (),
          load_warnings: Iterable[LoadError] = (),
          stale_files: Iterable[str] = (), rejections: Iterable[Rejection] = (),
          generation: int | None = None) -> StatusDocument:
    """The document of these inputs, from scratch."""
    rejections = tuple(rejections)
    refused = refused_objects(result.ir, rejections)
    served = served_objects(result.ir)
    front = front_objects(result.ir)
    by_object = result.problems_by_object()
    refs = {obj.ref for obj in snapshot.all()} | set(by_object) | set(result.statuses)
    objects = {}
    for ref in refs:
        objects[ref] = _entry(ref, snapshot, result.ir, problems=tuple(by_object.get(ref, ())),
                              status=result.statuses.get(ref),
                              mine=tuple(refused.get(ref, ())), served=ref in served,
                              front=ref in front)
    return StatusDocument(objects=MappingProxyType(objects), load_errors=tuple(load_errors),
                          load_warnings=tuple(load_warnings),
                          stale_files=tuple(stale_files), rejections=rejections,
                          generation=generation, serial=next(_SERIALS))


_SERIALS = itertools.count(1)


def _entry(ref: ObjectRef, snapshot: Snapshot, ir: IR, *, problems: tuple[Problem, ...],
           status: ObjectStatus | None, mine: tuple[Rejection, ...], served: bool,
           front: bool) -> ObjectEntry:
    """One object's entry from its own inputs (``mine``: the rejections that land on it)."""
    if status is not None and mine and ref.kind == "Gateway":
        status = _not_programmed(status, snapshot.get(Gateway, ref.namespace, ref.name), ir,
                                 mine)
    not_owned = next((p for p in problems if str(p.reason) == NOT_OWNED), None)
    return ObjectEntry(
        ref=ref, owned=not_owned is None,
        not_owned_reason=not_owned.message if not_owned else "",
        accepted=not_owned is None and _accepted(ref, problems, status, mine, served),
        problems=problems, status=status, rejections=mine, front=front)


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
                    in_snapshot.get(ref.kind, _NONE):
                if objects.pop(ref, None) is not None:
                    redone.add(ref)
                continue
            entry = _entry(ref, snapshot, result.ir, problems=problems, status=status,
                           mine=tuple(self._refused.get(ref, ())),
                           served=self._served[ref] > 0, front=self._front[ref] > 0)
            old = objects.get(ref)
            if old is None or old != entry:
                objects[ref] = entry
                redone.add(ref)
        doc = StatusDocument(
            objects=MappingProxyType(objects), load_errors=tuple(load_errors),
            load_warnings=tuple(load_warnings), stale_files=tuple(stale_files),
            rejections=rejections, generation=generation, serial=next(_SERIALS),
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


_NONE: Mapping[Key, Any] = MappingProxyType({})
_K = TypeVar("_K")


class MapDiff(Generic[_K]):
    """Successive versions of one map: which keys' values were added, replaced (by identity)
    or removed since the last version. An index of the values' ids is built at C speed and
    compared as sets, so a map of 10,000 costs no key hashing and no Python loop over it.
    Exact where each value sits under a key of its own (a snapshot kind by key, pools by
    name, statuses by object: the translator keeps a status for the object it was made
    for); a value found under several keys makes it compare key by key instead. A map given
    must never change afterwards (a state's maps are frozen): its index is kept by identity."""

    def __init__(self) -> None:
        self._map: Mapping[_K, Any] = MappingProxyType({})
        self._index: dict[int, _K] | None = {}  # None: not built yet

    def rebase(self, new: Mapping[_K, Any]) -> None:
        """Make ``new`` the last version without diffing (the caller knows what changed)."""
        if new is not self._map:
            self._map, self._index = new, None

    def update(self, new: Mapping[_K, Any], *,
               known: tuple[Mapping[_K, Any], Iterable[_K]] | None = None) -> list[_K]:
        """The keys that differ from the last version; ``new`` becomes the last version.
        ``known``: (base, keys), the producer's word that ``new`` differs from ``base`` only
        under ``keys`` (``IRChange.pools``: ``pool_hint``); taken, with no diff at all, when
        ``base`` is the last version."""
        old = self._map
        if new is old:
            return []
        if known is not None and known[0] is old:
            self.rebase(new)
            return list(known[1])
        aligned = _aligned_changes(old, new)
        if aligned is not None:
            self.rebase(new)
            return aligned
        old_index = self._index if self._index is not None else _id_index(old)
        index = _id_index(new)
        if len(index) != len(new) or len(old_index) != len(old):
            out = [key for key, value in new.items() if old.get(key) is not value]
            out += old.keys() - new.keys()
        else:
            new_ids, old_ids = id_changes(old_index, index)
            # A replaced value's key is both new and gone by id: named once (a reader that
            # counts per key, like the NPL planner's served pools, would count it twice).
            out = list(dict.fromkeys([index[i] for i in new_ids] + [old_index[i] for i in old_ids]))
        self._map, self._index = new, index
        return out


class KindChanges:
    """The keys of some snapshot kinds added, replaced (by identity) or removed from one
    snapshot to the next a reader sees: the source's change list (``SourceUpdate.changed``)
    when the snapshot's generation directly follows the last one seen, else a ``MapDiff`` per
    kind (C speed). Either way no Python loop runs over a kind's whole map."""

    def __init__(self, kinds: Iterable[str]) -> None:
        self._diffs: dict[str, MapDiff[Key]] = {kind: MapDiff() for kind in kinds}
        self._generation: int | None = None

    def update(self, snapshot: Snapshot, *, generation: int | None,
               changed: Iterable[tuple[str, Key]] | None) -> set[tuple[str, Key]]:
        """(kind, key) of the watched kinds that differ from the last snapshot seen."""
        kinds = snapshot.objects
        last, self._generation = self._generation, generation
        if changed is not None and generation is not None and last is not None \
                and generation == last + 1:
            for kind, diff in self._diffs.items():
                diff.rebase(kinds.get(kind, _NONE))
            return {(kind, key) for kind, key in changed if kind in self._diffs}
        return {(kind, key) for kind, diff in self._diffs.items()
                for key in diff.update(kinds.get(kind, _NONE))}


def problem_changes(old: tuple[Problem, ...], new: tuple[Problem, ...]
                    ) -> tuple[dict[int, int], list[Problem], list[Problem]] | None:
    """(position of each problem of ``new`` by id, problems only in ``new``, problems only in
    ``old``), by identity and at C speed (the translator keeps unchanged problems as the same
    objects); None when that does not tell the change — a problem listed twice, or the kept
    ones in another order — and the caller must look at every problem."""
    ids = list(map(id, new))
    position = dict(zip(ids, range(1, len(ids) + 1), strict=True))
    if len(position) != len(new):
        return None
    old_index = dict(zip(map(id, old), old, strict=True))
    if len(old_index) != len(old):
        return None
    kept = list(filter(None, map(position.get, old_index)))  # positions from 1: never 0
    if kept != sorted(kept):
        return None
    added, removed = id_changes(old_index, position)
    return position, [new[position[i] - 1] for i in added], [old_index[i] for i in removed]


def pool_hint(result: Result) -> tuple[Mapping[str, Pool], Iterable[str]] | None:
    """``MapDiff.update``'s ``known`` for the pools of ``result.ir``: the translator's word
    (``IRChange``) on which pools differ from the IR before, if it gave one."""
    change = result.change
    return None if change is None else (change.base.pools, change.pools)


def host_changes(before: dict[int, VirtualHost], listener: Listener,
                 pairs: Iterable[tuple[VirtualHost | None, VirtualHost | None]] | None
                 ) -> tuple[dict[int, VirtualHost], list[VirtualHost], list[VirtualHost]]:
    """(``listener``'s virtual hosts by id, those added, those removed) since ``before`` (the
    previous listener's, by id; given up by the caller: it may be reused). ``pairs``: the
    translator's (old, new) virtual hosts of this listener (``IRChange.vhosts``), taken when
    they account for the difference — O(change) — else an id diff (C speed)."""
    if pairs is not None:
        pairs = tuple(pairs)
        removed = [old for old, _ in pairs if old is not None]
        added = [new for _, new in pairs if new is not None]
        if all(id(v) in before and before[id(v)] is v for v in removed) \
                and len(before) - len(removed) + len(added) == len(listener.virtual_hosts) \
                and not any(id(v) in before for v in added):
            for v in removed:
                del before[id(v)]
            before.update(zip(map(id, added), added, strict=True))
            if len(before) == len(listener.virtual_hosts):
                return before, added, removed
            for v in added:  # not what the hint said (a host listed twice): undo, diff
                before.pop(id(v), None)
            before.update(zip(map(id, removed), removed, strict=True))
    hosts = dict(zip(map(id, listener.virtual_hosts), listener.virtual_hosts, strict=True))
    new_ids, old_ids = id_changes(before, hosts)
    return hosts, [hosts[i] for i in new_ids], [before[i] for i in old_ids]


def _aligned_changes(old: Mapping[_K, Any], new: Mapping[_K, Any]) -> list[_K] | None:
    """The keys whose values differ by identity, when ``new`` holds ``old``'s key objects in
    the same order, bar keys added after them or removed from the end (a map copied and
    edited in place, as the translator's statuses): compared pairwise at C speed, nothing
    hashed or indexed. None when the keys are not so aligned."""
    n = min(len(old), len(new))
    if not all(map(operator.is_, itertools.islice(old, n), itertools.islice(new, n))):
        return None
    out = list(itertools.compress(itertools.islice(new, n), map(
        operator.is_not, itertools.islice(old.values(), n), itertools.islice(new.values(), n))))
    out += itertools.islice(new, n, None)
    out += itertools.islice(old, n, None)
    return out


def id_changes(old: Mapping[int, Any], new: Mapping[int, Any]) -> tuple[list[int], list[int]]:
    """(ids only in ``new``, ids only in ``old``) of two id indexes, at C speed; equal key
    sets (the usual case for most maps) cost one comparison."""
    if len(old) == len(new) and old.keys() == new.keys():
        return [], []
    return list(new.keys() - old.keys()), list(old.keys() - new.keys())


def _id_index(values: Mapping[_K, Any]) -> dict[int, _K]:
    """id of each value → its key. Several readers diff the same maps each state (the IR's
    pools: the status document, the metrics, the readiness gate, the NPL plan), so the last
    few indexes are kept, with their maps (a kept map's ids cannot be reused)."""
    known = _INDEXES.get(id(values))
    if known is not None and known[0] is values:
        return known[1]
    index = dict(zip(map(id, values.values()), values.keys(), strict=True))
    _INDEXES[id(values)] = (values, index)
    while len(_INDEXES) > _KEPT_INDEXES:
        del _INDEXES[next(iter(_INDEXES))]
    return index


_KEPT_INDEXES = 8  # a state's maps that readers diff: pools, statuses, Services, a kind or two
_INDEXES: dict[int, tuple[Mapping[Any, Any], dict[int, Any]]] = {}


def _head(listener: Listener) -> tuple[_Refs, _Refs]:
    """(served, front) refs of a listener's own parts: its origins, L4 routes and certificates
    (route origins of its virtual hosts are counted per virtual host)."""
    l4 = tuple(r.origin for r in listener.l4_routes)
    certs = tuple(c.origin for c in listener.certificates if c.origin is not None)
    return (*listener.origins, *l4, *certs), (*listener.origins, *l4)


def _accepted(ref: ObjectRef, problems: tuple[Problem, ...], status: ObjectStatus | None,
              refused: tuple[Rejection, ...], served: bool) -> bool:
    if ref.kind in _API_KINDS and status is not None:
        verdict = _api_accepted(status)
        if verdict is not None:
            return verdict
    if refused:
        return False
    return served or not any(p.severity is Severity.ERROR for p in problems)


def _api_accepted(status: ObjectStatus) -> bool | None:
    """The Accepted condition (object, else any parent); None when the status has none."""
    own = [c.status for c in status.conditions if c.type == "Accepted"]
    if own:
        return own[0] is True
    parents = [c.status for p in status.parents for c in p.conditions if c.type == "Accepted"]
    if parents:
        return any(s is True for s in parents)
    return None


def served_objects(ir: IR) -> frozenset[ObjectRef]:
    """Every object at least one IR node originates from."""
    out: set[ObjectRef] = set()
    for listener in ir.listeners:
        out.update(listener.origins)
        out.update(r.origin for v in listener.virtual_hosts for r in v.routes)
        out.update(r.origin for r in listener.l4_routes)
        out.update(c.origin for c in listener.certificates if c.origin is not None)
    out.update(p.origin for p in ir.pools.values() if p.origin is not None)
    return frozenset(out)


def front_objects(ir: IR) -> frozenset[ObjectRef]:
    """The objects clients reach Podway through: listener and route origins (LoadBalancer
    Services, Ingresses, Gateways, routes) — not the backend Services, Secrets or Pods."""
    out: set[ObjectRef] = set()
    for listener in ir.listeners:
        out.update(listener.origins)
        out.update(r.origin for v in listener.virtual_hosts for r in v.routes)
        out.update(r.origin for r in listener.l4_routes)
    return frozenset(out)


def refused_objects(ir: IR, rejections: Iterable[Rejection]
                    ) -> dict[ObjectRef, list[Rejection]]:
    """Each rejection on the objects its resource came from (none for unnamed rejections)."""
    out: dict[ObjectRef, list[Rejection]] = {}
    for rejection in rejections:
        for ref in origins_of(ir, rejection.type_url, rejection.resource):
            out.setdefault(ref, []).append(rejection)
    return out


def origins_of(ir: IR, type_url: str, name: str) -> tuple[ObjectRef, ...]:
    """The objects an xDS resource of ``type_url`` called ``name`` was built from."""
    if not name:
        return ()
    found: list[ObjectRef] = []
    if type_url in (types.CLUSTER, types.ENDPOINT):
        pool = ir.pools.get(name)
        if pool is not None and pool.origin is not None:
            found.append(pool.origin)
    for listener in ir.listeners:
        if (type_url == types.LISTENER and listener.name == name) or (
                type_url == types.ROUTE and (name == listener.name
                                             or name.startswith(listener.name + "/sni/"))):
            found.extend(listener.origins)
        elif type_url in (types.ROUTE, types.SCOPE) and name.startswith(
                listener.name + "/host/"):  # a scope and its table: its host's routes
            host = name[len(listener.name) + len("/host/"):]
            found.extend(r.origin for v in listener.virtual_hosts
                         if v.hostname.lower() == host for r in v.routes)
        elif type_url == types.SECRET:
            for cert in listener.certificates:
                if cert.name == name:
                    found.extend(listener.origins)
                    if cert.origin is not None:
                        found.append(cert.origin)
    return tuple(dict.fromkeys(found))


def _not_programmed(status: ObjectStatus, gateway: Gateway | None, ir: IR,
                    refused: tuple[Rejection, ...]) -> ObjectStatus:
    """A Gateway's status with ``Programmed=False`` where an engine refused its listeners."""
    names = {r.resource for r in refused
             if r.type_url in (types.LISTENER, types.ROUTE, types.SCOPE)}
    ports = {ls.port for ls in ir.listeners
             if ls.name in names or any(n.startswith((ls.name + "/sni/", ls.name + "/host/"))
                                        for n in names)}
    sections = {ls.name for ls in gateway.spec.listeners if ls.port in ports} if gateway else set()
    message = "; ".join(f"engine {r.node} refused {r.type_name} {r.resource}: {r.message}"
                        for r in refused)
    gen = next((c.observed_generation for c in status.conditions), 0)
    refusal = Condition(type="Programmed", status=False, reason="Invalid", message=message,
                        observed_generation=gen)
    listeners = tuple(
        replace(ls, conditions=_with(ls.conditions, refusal)) if ls.name in sections else ls
        for ls in status.listeners)
    return replace(status, conditions=_with(status.conditions, refusal), listeners=listeners)


def _with(conditions: tuple[Condition, ...], new: Condition) -> tuple[Condition, ...]:
    """``new`` in place of the condition of its type (keeping its generation), else appended."""
    out = tuple(replace(new, observed_generation=c.observed_generation) if c.type == new.type
                else c for c in conditions)
    return out if any(c.type == new.type for c in conditions) else (*out, new)


def _entry_data(entry: ObjectEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"accepted": entry.accepted}
    if not entry.owned:
        out["owned"] = False
        out["reason"] = entry.not_owned_reason
    if entry.problems:
        out["problems"] = [problem_data(p) for p in entry.problems]
    if entry.rejections:
        out["engine_rejections"] = [_rejection_data(r) for r in entry.rejections]
    if entry.status is not None:
        out["status"] = to_api(entry.status, kind=entry.ref.kind)
    return out


def problem_data(problem: Problem) -> dict[str, str]:
    return {k: v for k, v in (("severity", str(problem.severity)),
                              ("reason", str(problem.reason)), ("message", problem.message),
                              ("field", problem.field)) if v}


def _rejection_data(rejection: Rejection) -> dict[str, str]:
    out = {"node": rejection.node, "type": rejection.type_name, "version": rejection.version}
    if rejection.resource:
        out["resource"] = rejection.resource
    out["message"] = rejection.message
    return out


def _refs_by_rejection(objects: Mapping[ObjectRef, ObjectEntry]
                       ) -> dict[Rejection, list[ObjectRef]]:
    out: dict[Rejection, list[ObjectRef]] = {}
    for ref in sorted(objects):
        for rejection in objects[ref].rejections:
            out.setdefault(rejection, []).append(ref)
    return out
