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
those list it under ``engine_rejections``. A Gateway API listener's refusal lands on the object
that declared it, a Gateway or a ListenerSet (``Listener.sections``), which shows
``Programmed=False`` on itself and on the listeners hit (``refusals``), in the file and in the
API status alike. Invariant: the document is a pure function of its inputs (``to_data`` adds a
timestamp only when asked).

Readers that follow a pipeline use ``incremental.DocumentBuilder``: it keeps the last document
and recomputes only the entries whose inputs changed; every document it builds equals ``build``
from scratch of the same inputs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from podway.envoy import types
from podway.envoy.config import scoped
from podway.ir import IR
from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.model.kinds import CRD_STATUS_KINDS
from podway.model.loader import LoadError
from podway.pipeline import Rejection, State
from podway.status.refusals import listener_objects, with_refusals
from podway.translate import Problem, Result, Severity
from podway.translate.core.status import ObjectStatus, to_api

NOT_OWNED = "NotOwned"  # the reason of the problem that says "not Podway's object"
# Kinds whose listeners an engine may refuse: their status says which (``refusals``).
_LISTENER_KINDS = frozenset({"Gateway", "ListenerSet"})


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
        objects[ref] = object_entry(ref, snapshot, result.ir,
                                    problems=tuple(by_object.get(ref, ())),
                                    status=result.statuses.get(ref),
                                    mine=tuple(refused.get(ref, ())), served=ref in served,
                                    front=ref in front)
    return StatusDocument(objects=MappingProxyType(objects), load_errors=tuple(load_errors),
                          load_warnings=tuple(load_warnings),
                          stale_files=tuple(stale_files), rejections=rejections,
                          generation=generation, serial=next(SERIALS))


SERIALS = itertools.count(1)


def object_entry(ref: ObjectRef, snapshot: Snapshot, ir: IR, *, problems: tuple[Problem, ...],
                 status: ObjectStatus | None, mine: tuple[Rejection, ...], served: bool,
                 front: bool) -> ObjectEntry:
    """One object's entry from its own inputs (``mine``: the rejections that land on it)."""
    if status is not None and mine and ref.kind in _LISTENER_KINDS:
        status = with_refusals(status, ref, ir, mine)
    not_owned = next((p for p in problems if str(p.reason) == NOT_OWNED), None)
    return ObjectEntry(
        ref=ref, owned=not_owned is None,
        not_owned_reason=not_owned.message if not_owned else "",
        accepted=not_owned is None and _accepted(ref, problems, status, mine, served),
        problems=problems, status=status, rejections=mine, front=front)


def _accepted(ref: ObjectRef, problems: tuple[Problem, ...], status: ObjectStatus | None,
              refused: tuple[Rejection, ...], served: bool) -> bool:
    if ref.kind in CRD_STATUS_KINDS and status is not None:
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
            found.extend(listener_objects(listener))
        elif type_url == types.SCOPE and name.startswith(listener.name + "/host/"):
            host = name[len(listener.name) + len("/host/"):]  # a scope: its host's routes
            found.extend(r.origin for v in listener.virtual_hosts
                         if v.hostname.lower() == host for r in v.routes)
        elif type_url == types.ROUTE and (at := scoped.bucket_of(listener.name, name)) is not None:
            found.extend(r.origin for v in listener.virtual_hosts  # a shared table: its hosts'
                         if v.hostname != "*" and scoped.bucket(v.hostname) == at
                         for r in v.routes)
        elif type_url == types.SECRET:
            for cert in listener.certificates:
                if cert.name == name:
                    found.extend(listener_objects(listener))
                    if cert.origin is not None:
                        found.append(cert.origin)
    return tuple(dict.fromkeys(found))


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
