"""How full each VIP pool is: addresses assigned and still available, per family — what a pool
object's status shows (MetalLB's ``IPAddressPool`` status fields ``assignedIPv4``,
``assignedIPv6``, ``availableIPv4``, ``availableIPv6``; Podway's ``VIPPool`` the same).

``PoolUsage`` follows one allocation (``VipMap``) to the next and costs the change: only the
grants that differ from the previous map are looked at, each address found in its pool by a
bisection over the pools' ranges, so a Service added among thousands touches one pool's
counts. A new set of pools (a pool object added, changed or removed: rare) counts again from
scratch. Pure: no I/O.

An address shared by several objects (``allow-shared-vip``) counts once; an address held outside
every pool (a request that was refused) counts nowhere. Counts are capped at 2**63 - 1 (the
API's int64: an IPv6 /64 holds more).
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from podway.model.base import ObjectRef
from podway.programs.ipam.pools import AddressRange, IPAddress, Pool
from podway.translate.core.vips import VipGrant

INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Counts:
    """One pool's figures, as the status shows them."""

    assigned_v4: int = 0
    assigned_v6: int = 0
    available_v4: int = 0
    available_v6: int = 0

    def status(self) -> dict[str, int]:
        return {"assignedIPv4": min(self.assigned_v4, INT64_MAX),
                "assignedIPv6": min(self.assigned_v6, INT64_MAX),
                "availableIPv4": min(self.available_v4, INT64_MAX),
                "availableIPv6": min(self.available_v6, INT64_MAX)}


def usable_size(pool: Pool) -> tuple[int, int]:
    """How many addresses ``pool`` may hand out, IPv4 and IPv6 (without enumerating them)."""
    sizes = [0, 0]
    for r in pool.ranges:
        size = r.size
        if pool.avoid_buggy_ips and r.first.version == 4:
            size -= _buggy_in(r)
        sizes[r.first.version == 6] += size
    return sizes[0], sizes[1]


def _buggy_in(r: AddressRange) -> int:
    """IPv4 addresses of ``r`` ending in .0 or .255."""
    def upto(n: int) -> int:  # such addresses in [0, n]
        return (n // 256 + 1) + ((n - 255) // 256 + 1 if n >= 255 else 0)

    first, last = int(r.first), int(r.last)
    return upto(last) - (upto(first - 1) if first > 0 else 0)


class PoolUsage:
    """Assigned addresses per pool, followed from one ``VipMap`` to the next (see the module
    docstring)."""

    def __init__(self) -> None:
        self._pools: tuple[Pool, ...] = ()
        self._sizes: dict[str, tuple[int, int]] = {}
        self._starts: list[tuple[int, int]] = []  # (family, first) of every range, sorted
        self._ranges: list[tuple[AddressRange, str]] = []  # in the same order
        self._grants: dict[ObjectRef, VipGrant] = {}
        self._holders: dict[IPAddress, int] = {}  # address → how many objects hold it
        self._assigned: dict[str, list[int]] = {}  # pool → [IPv4, IPv6] assigned

    def update(self, pools: Sequence[Pool], grants: Mapping[ObjectRef, VipGrant]) -> set[str]:
        """Follow ``grants`` over ``pools``; the names of the pools whose counts changed."""
        if tuple(pools) != self._pools:
            before = {name: self.counts(name) for name in self._sizes}
            self._index(pools)
            self._grants, self._holders = {}, {}
            self._apply(grants)
            return {name for name in {*before, *self._sizes}
                    if before.get(name) != self.counts(name)}
        return self._apply(grants)

    def counts(self, name: str) -> Counts | None:
        """The figures of pool ``name`` (None: no such pool)."""
        size = self._sizes.get(name)
        if size is None:
            return None
        v4, v6 = self._assigned[name]
        return Counts(v4, v6, max(size[0] - v4, 0), max(size[1] - v6, 0))

    def _index(self, pools: Sequence[Pool]) -> None:
        self._pools = tuple(pools)
        self._sizes = {p.name: usable_size(p) for p in pools}
        self._assigned = {p.name: [0, 0] for p in pools}
        found = sorted(((r.first.version, int(r.first)), r, p.name)
                       for p in pools for r in p.ranges)
        self._starts = [start for start, _, _ in found]
        self._ranges = [(r, name) for _, r, name in found]

    def _apply(self, grants: Mapping[ObjectRef, VipGrant]) -> set[str]:
        changed: set[str] = set()
        old = self._grants
        for ref, grant in grants.items():
            before = old.get(ref)
            if before is grant or (before is not None and before.addresses == grant.addresses):
                continue
            if before is not None:
                changed |= self._count(before.addresses, -1)
            changed |= self._count(grant.addresses, 1)
        for ref in old.keys() - grants.keys():
            changed |= self._count(old[ref].addresses, -1)
        self._grants = dict(grants)
        return changed

    def _count(self, addresses: Iterable[str], step: int) -> set[str]:
        changed = set()
        for text in addresses:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                continue
            name = self._pool_of(address)
            if name is None:
                continue
            held = self._holders.get(address, 0) + step
            if held > 0:
                self._holders[address] = held
            else:
                self._holders.pop(address, None)
            if (step > 0 and held == 1) or (step < 0 and held == 0):
                self._assigned[name][address.version == 6] += step
                changed.add(name)
        return changed

    def _pool_of(self, address: IPAddress) -> str | None:
        i = bisect.bisect_right(self._starts, (address.version, int(address))) - 1
        if i < 0:
            return None
        r, name = self._ranges[i]
        return name if address in r else None
