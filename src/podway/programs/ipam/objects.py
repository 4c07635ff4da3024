"""VIP pools from Kubernetes objects: Podway's ``VIPPool`` and MetalLB's ``IPAddressPool``.

A pure function of the snapshot, like the allocation, so every controller replica reads the
same pools. Pools from the controller's file come first; then pool objects: those holding an
address some object already holds first (a newcomer that overlaps a pool in use never takes its
place), each group oldest first. An object whose spec is not usable, or whose name or addresses
are already another pool's, is not used and gets a problem (a Warning event) — never a crash,
and never a silent overlap (an address belongs to one pool).

MetalLB's pools are read as MetalLB reads them: only from its namespace (``metallb-system`` by
default), and an IPv4 CIDR includes its network and broadcast addresses (MetalLB hands them
out unless ``avoidBuggyIPs``), where a VIPPool's CIDR, like the file's, leaves them out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from podway.base.netaddr import is_ip
from podway.model.base import K8sObject
from podway.model.kinds import NOT_SERVED_MODELS
from podway.model.snapshot import Snapshot
from podway.model.vips import IPAddressPool, VIPPool
from podway.programs.ipam.pools import IPAddress, Pool, pool_of
from podway.translate.core.problems import Problem, Reason, Severity

METALLB_NAMESPACE = "metallb-system"


class PoolKinds(StrEnum):
    """Which pool objects the IPAM reads (``podway controller --vip-pools-from``)."""

    VIPPOOLS = "vippools"  # Podway's VIPPool (cluster-scoped)
    METALLB = "metallb"  # MetalLB's IPAddressPool, in its namespace


@dataclass(frozen=True, slots=True)
class ObjectPools:
    """The pools in use (the file's, then the objects'), and the objects refused."""

    pools: tuple[Pool, ...]
    problems: tuple[Problem, ...] = ()


def pools_of(snapshot: Snapshot, configured: Sequence[Pool], kinds: Iterable[PoolKinds], *,
             metallb_namespace: str = METALLB_NAMESPACE,
             in_use: Collection[str] = ()) -> ObjectPools:
    """``configured`` plus the pools of the snapshot's pool objects of ``kinds``; ``in_use``:
    the addresses objects hold now (their status)."""
    objects: list[K8sObject] = []
    chosen = set(kinds)
    if PoolKinds.VIPPOOLS in chosen:
        objects += snapshot.kind(VIPPool).values()
    if PoolKinds.METALLB in chosen:
        objects += [p for (ns, _), p in snapshot.kind(IPAddressPool).items()
                    if ns == metallb_namespace]
    held = [ipaddress.ip_address(a) for a in in_use if is_ip(a)]
    parsed = [(obj, _pool(obj)) for obj in objects]
    parsed.sort(key=lambda item: (not _holds(item[1], held), *item[0].age_key(), item[0].KIND))
    pools = list(configured)
    problems: list[Problem] = []
    if PoolKinds.METALLB in chosen:
        problems += _unserved(snapshot, metallb_namespace)
        problems += _unknown(obj for obj in objects if isinstance(obj, IPAddressPool))
    for obj, (pool, invalid) in parsed:
        problem = invalid if pool is None else _conflict(obj, pool, pools)
        if problem is not None:
            problems.append(problem)
        elif pool is not None:
            pools.append(pool)
    return ObjectPools(tuple(pools), tuple(problems))


def _unserved(snapshot: Snapshot, namespace: str) -> list[Problem]:
    """One problem on each MetalLB object Podway does not serve from the API."""
    out = []
    for model in NOT_SERVED_MODELS:
        for (ns, name), obj in sorted(snapshot.kind(model).items()):
            if ns == namespace:
                instead = getattr(model, "SERVED_BY", "")
                out.append(Problem(
                    ref=obj.ref, reason=Reason.UNSUPPORTED_VALUE, severity=Severity.WARNING,
                    message=f"{model.KIND} {name!r} is not read by the Podway controller; use "
                    f"{instead} (docs/vips.md#coming-from-metallb)"))
    return out


def _unknown(pools: Iterable[IPAddressPool]) -> list[Problem]:
    """One warning per spec field of a MetalLB pool that Podway does not know (a newer
    MetalLB's): said on the object, as the speakers say it on theirs; the pool is used with the
    fields Podway knows."""
    return [Problem(ref=obj.ref, reason=Reason.UNSUPPORTED_FIELD, severity=Severity.WARNING,
                    field=f"spec.{path}",
                    message=f"IPAddressPool {obj.metadata.name!r}: spec.{path} is not carried "
                    "(a field Podway does not know); the pool is used without it")
            for obj in pools for path in obj.spec.unknown_fields()]


def _pool(obj: K8sObject) -> tuple[Pool | None, Problem | None]:
    assert isinstance(obj, VIPPool | IPAddressPool)
    name = obj.metadata.name
    raw = obj.spec.model_dump(by_alias=True, exclude_none=True)
    try:
        return pool_of(name, raw, whole_cidrs=isinstance(obj, IPAddressPool)), None
    except ValueError as err:
        return None, Problem(ref=obj.ref, reason=Reason.INVALID_POOL,
                             message=f"{obj.KIND} {name!r} is not used: {err}", field="spec")


def _holds(parsed: tuple[Pool | None, Problem | None], held: Sequence[IPAddress]) -> bool:
    pool = parsed[0]
    return pool is not None and any(a in pool for a in held)


def _conflict(obj: K8sObject, pool: Pool, taken: Sequence[Pool]) -> Problem | None:
    name = obj.metadata.name
    for other in taken:
        if other.name == name:
            return Problem(ref=obj.ref, reason=Reason.POOL_CONFLICT,
                           message=f"{obj.KIND} {name!r} is not used: another VIP pool already "
                           "has that name")
        for r in pool.ranges:
            for o in other.ranges:
                if r.overlaps(o):
                    return Problem(ref=obj.ref, reason=Reason.POOL_CONFLICT,
                                   message=f"{obj.KIND} {name!r} is not used: {r} overlaps {o} "
                                   f"of pool {other.name!r} (an address belongs to one pool)",
                                   field="spec.addresses")
    return None
