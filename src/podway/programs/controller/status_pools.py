"""The status of the pool objects the IPAM reads (``--vip-pools-from``): how full each pool is
and whether it is used.

- ``VIPPool``: ``assignedIPv4``, ``assignedIPv6``, ``availableIPv4``, ``availableIPv6`` and an
  ``Accepted`` condition — True, or False with reason ``InvalidPool`` (its spec is not usable)
  or ``PoolConflict`` (its name or addresses are another pool's) and the same message as the
  Warning event.
- MetalLB's ``IPAddressPool``: the same four counts, MetalLB's own status fields (MetalLB
  ≥ 0.14; its CRD has no conditions, so a refused pool shows 0 available and the event says
  why).

``PoolStatuses`` follows the pipeline's states and costs the change: the counts come from
``PoolUsage`` (only the grants that changed are looked at), and only the pools whose counts
changed are recomputed — every pool object only when the pool objects or their problems
changed. Pure: the status writer PATCHes what it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podway.model.base import K8sObject
from podway.model.snapshot import Key, Snapshot
from podway.model.vips import IPAddressPool, VIPPool
from podway.pipeline import State
from podway.programs.ipam import Ipam, PoolKinds
from podway.programs.ipam.usage import Counts, PoolUsage
from podway.translate import TranslateOptions
from podway.translate.core.problems import Problem, Reason

Target = tuple[str, Key]
Status = dict[str, Any]

POOL_CONDITION = "Accepted"
POOL_KINDS = (VIPPool.KIND, IPAddressPool.KIND)  # the kinds whose objects get a status here
REFUSED = frozenset({Reason.INVALID_POOL, Reason.POOL_CONFLICT})


def pool_ipam(opts: TranslateOptions) -> Ipam | None:
    """The IPAM whose pool objects get a status (None: no pool objects are read)."""
    vips = opts.vips
    return vips if isinstance(vips, Ipam) and vips.kinds else None


class PoolStatuses:
    """The wanted status of every pool object, kept from state to state (module docstring)."""

    def __init__(self, ipam: Ipam, opts: TranslateOptions) -> None:
        self._ipam = ipam
        self._opts = opts
        self._usage = PoolUsage()
        self._seen: tuple[Any, ...] = ()
        self._names: dict[str, Target] = {}  # pool name → the object it came from
        self.want: dict[Target, Status] = {}

    def update(self, state: State) -> set[Target]:
        """Follow ``state``; the targets whose wanted status changed (added or gone too)."""
        snapshot = state.update.snapshot
        read = self._ipam.pools_in(snapshot, self._opts)
        changed = self._usage.update(read.pools, self._ipam.grants(snapshot, self._opts))
        seen = (snapshot.kind(VIPPool), snapshot.kind(IPAddressPool), read.problems)
        refused = {p.ref: p for p in read.problems if p.reason in REFUSED}
        objects: Mapping[Target, K8sObject]
        if len(self._seen) == 3 and all(a is b for a, b in zip(seen[:2], self._seen[:2],
                                                               strict=True)) \
                and seen[2] == self._seen[2]:
            objects = {t: o for name in changed if (t := self._names.get(name)) is not None
                       and (o := _object(snapshot, t)) is not None}
            gone: set[Target] = set()
        else:
            objects = self._objects(snapshot)
            gone = set(self.want) - set(objects)
            # a pool's name is its used object's (a refused one of the same name hands out
            # nothing: a VIPPool and an IPAddressPool may share a name, one refused)
            self._names = {o.metadata.name: t for t, o in objects.items()
                           if o.ref not in refused}
        self._seen = seen
        out = set()
        for target, obj in objects.items():
            status = _status(obj, refused.get(obj.ref),
                             self._usage.counts(obj.metadata.name))
            if status != self.want.get(target):
                self.want[target] = status
                out.add(target)
        for target in gone:
            del self.want[target]
            out.add(target)
        return out

    def _objects(self, snapshot: Snapshot) -> dict[Target, K8sObject]:
        out: dict[Target, K8sObject] = {}
        if PoolKinds.VIPPOOLS in self._ipam.kinds:
            out.update((("VIPPool", key), obj) for key, obj in snapshot.kind(VIPPool).items())
        if PoolKinds.METALLB in self._ipam.kinds:
            out.update((("IPAddressPool", key), obj)
                       for key, obj in snapshot.kind(IPAddressPool).items()
                       if key[0] == self._ipam.metallb_namespace)
        return out


def _object(snapshot: Snapshot, target: Target) -> K8sObject | None:
    kind, (namespace, name) = target
    model = VIPPool if kind == "VIPPool" else IPAddressPool
    return snapshot.get(model, namespace, name)


def _status(obj: K8sObject, refused: Problem | None, counts: Counts | None) -> Status:
    """One pool object's status; a refused object (or one whose name another pool took)
    hands out nothing."""
    if refused is not None or counts is None:
        counts = Counts()
    status: Status = counts.status()
    if isinstance(obj, VIPPool):
        if refused is not None:
            condition = {"status": "False", "reason": str(refused.reason),
                         "message": refused.message}
        else:
            condition = {"status": "True", "reason": "Accepted",
                         "message": "the IPAM hands out its addresses"}
        status["conditions"] = [{"type": POOL_CONDITION, **condition,
                                 "observedGeneration": obj.metadata.generation}]
    return status


def pool_statuses(state: State, opts: TranslateOptions) -> dict[Target, Status]:
    """Every pool object's status, from scratch."""
    ipam = pool_ipam(opts)
    if ipam is None:
        return {}
    statuses = PoolStatuses(ipam, opts)
    statuses.update(state)
    return statuses.want
