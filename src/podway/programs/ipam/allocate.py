"""The allocation itself: claims and pools in, one grant per claim out. Pure and deterministic.

Invariants (property-tested in ``tests/unit/programs/ipam``):

- No address is held by two owners, except sharers: every holder of a shared address carries
  the same ``podway.io/allow-shared-vip`` key and their (protocol, port) sets are disjoint.
- The result does not depend on the order of the claims: claims are visited oldest first
  (creationTimestamp, then uid, then name), so every replica — and the same replica after a
  restart — computes the same map from the same objects, and a conflict always goes to the
  oldest.
- Addresses an object already holds (its status) and still wants are kept first, then what
  objects ask for is placed, then addresses are handed out automatically: a live VIP is never
  taken from its holder (a request for it waits, pending), and an address a pending object asked
  for is never handed out automatically, so it gets it once it is free.
- An address whose owner is gone is free again at the next allocation (nothing is remembered
  but the objects themselves).

A request that cannot be honoured leaves the object pending (no address, a typed reason) — the
translator reports it as a problem, the controller turns it into a Warning event and condition.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from podway.model import ObjectRef
from podway.programs.ipam.claims import Claim
from podway.programs.ipam.pools import AddressRange, IPAddress, Pool
from podway.translate import annotations as ann
from podway.translate.core.problems import Reason
from podway.translate.core.vips import VipGrant


class _Table:
    """Who holds each address."""

    def __init__(self) -> None:
        self.holders: dict[IPAddress, list[Claim]] = {}
        # Addresses a pending object asked for: never handed out automatically, so the object
        # gets them once they are free instead of finding them taken by a newer one.
        self.reserved: set[IPAddress] = set()
        # Per range, where the next free address may be: every address before it is held,
        # reserved or avoided. Holders only grow while automatic addresses are handed out
        # (a release forgets it), so each pick goes on from the last one instead of scanning
        # the range from its start again (N automatic claims: O(N) addresses looked at, not
        # O(N²)).
        self.first_free: dict[AddressRange, int] = {}

    def reserve(self, claim: Claim) -> None:
        for text in claim.requested:
            try:
                self.reserved.add(ipaddress.ip_address(text))
            except ValueError:
                continue

    def can_take(self, address: IPAddress, claim: Claim) -> bool:
        holders = self.holders.get(address, [])
        return all(claim.share is not None and h.share == claim.share
                   and h.ports.isdisjoint(claim.ports) for h in holders)

    def take(self, addresses: Iterable[IPAddress], claim: Claim) -> None:
        for a in addresses:
            self.holders.setdefault(a, []).append(claim)

    def release(self, addresses: Iterable[IPAddress], claim: Claim) -> None:
        self.first_free.clear()
        for a in addresses:
            self.holders[a].remove(claim)
            if not self.holders[a]:
                del self.holders[a]


def allocate(claims: Iterable[Claim], pools: Sequence[Pool]) -> dict[ObjectRef, VipGrant]:
    table = _Table()
    grants: dict[ObjectRef, VipGrant] = {}
    order = sorted(claims, key=lambda c: c.order)
    waiting: list[Claim] = []
    asking: list[Claim] = []
    for claim in order:  # 1. what objects hold and still want: a live VIP is never taken away
        grant: VipGrant | None = None
        if claim.held and not claim.invalid and set(claim.requested) == set(claim.held):
            grant = _requested(claim, pools, table)  # asked for and granted before: keep it
            grant = grant if grant.addresses else None
        elif not (claim.requested or claim.invalid):
            grant = _held(claim, pools, table)
        if grant is not None:
            grants[claim.ref] = grant
        elif claim.requested or claim.invalid:
            asking.append(claim)
        else:
            waiting.append(claim)
    for claim in asking:  # 2. what objects ask for (oldest first)
        grants[claim.ref] = _requested(claim, pools, table)
        if not grants[claim.ref].addresses:  # pending: keep its addresses for it
            table.reserve(claim)
    for claim in waiting:  # 3. everything else, from the pools
        grants[claim.ref] = _automatic(claim, pools, table)
    return grants


def _pending(reason: Reason, message: str, field: str = "") -> VipGrant:
    return VipGrant(reason=reason, message=message, field=field)


def _pool_of(address: IPAddress, pools: Sequence[Pool]) -> Pool | None:
    return next((p for p in pools if address in p), None)


def _requested(claim: Claim, pools: Sequence[Pool], table: _Table) -> VipGrant:
    where = claim.requested_field
    if claim.invalid is not None:
        return _pending(Reason.INVALID_ADDRESS, f"{claim.invalid}; no VIP is allocated", where)
    addresses = [ipaddress.ip_address(a) for a in dict.fromkeys(claim.requested)]
    for a in addresses:
        pool = _pool_of(a, pools)
        if pool is None:
            return _pending(Reason.ADDRESS_NOT_IN_POOL,
                            f"{a} is in no configured VIP pool; nothing is bound", where)
        if claim.pool is not None and pool.name != claim.pool:
            return _pending(Reason.ADDRESS_NOT_IN_POOL,
                            f"{a} is in pool {pool.name!r}, not in {claim.pool!r} named by the "
                            f"{ann.VIP_POOL.name} annotation", where)
        if not _in_scope(pool, claim):
            return _pending(Reason.ADDRESS_NOT_ALLOWED, f"{a} is in pool {pool.name!r}, whose "
                            "serviceAllocation does not include this object", where)
        if not pool.usable(a):
            return _pending(Reason.ADDRESS_NOT_ALLOWED, f"{a} ends in .0 or .255, which pool "
                            f"{pool.name!r} avoids (avoidBuggyIPs)", where)
        if not table.can_take(a, claim):
            return _pending(Reason.ADDRESS_IN_USE, f"{a} is already allocated to "
                            f"{_names(table.holders[a])}; it is not shared with this object "
                            f"(same {ann.ALLOW_SHARED_VIP.name} key and disjoint ports needed)",
                            where)
    table.take(addresses, claim)
    return VipGrant(addresses=tuple(str(a) for a in addresses))


def _held(claim: Claim, pools: Sequence[Pool], table: _Table) -> VipGrant | None:
    """The addresses in the claim's status, when all are still its to keep (still in a pool
    it may draw from, and not taken by an older object); else None: allocate afresh."""
    if not claim.held:
        return None
    try:
        addresses = [ipaddress.ip_address(a) for a in dict.fromkeys(claim.held)]
    except ValueError:
        return None
    allowed = {p.name for p in _candidates(claim, pools, automatic=False)}
    for a in addresses:
        pool = _pool_of(a, pools)
        if pool is None or pool.name not in allowed or not table.can_take(a, claim):
            return None
    table.take(addresses, claim)
    return VipGrant(addresses=tuple(str(a) for a in addresses))


def _candidates(claim: Claim, pools: Sequence[Pool], *, automatic: bool) -> list[Pool]:
    """The pools the claim may draw from, in the order they are tried (priority, then as
    read)."""
    if claim.pool is not None:
        found = [p for p in pools if p.name == claim.pool and _in_scope(p, claim)]
    else:
        found = [p for p in pools if p.engine_group == claim.engine_group
                 and (p.auto_assign or not automatic) and _in_scope(p, claim)]
    return sorted(found, key=lambda p: p.rank)


def _in_scope(pool: Pool, claim: Claim) -> bool:
    return pool.scope.allows(claim.ref.namespace, claim.namespace_labels, claim.labels)


def _automatic(claim: Claim, pools: Sequence[Pool], table: _Table) -> VipGrant:
    candidates = _candidates(claim, pools, automatic=True)
    if not candidates:
        if claim.pool is not None and any(p.name == claim.pool for p in pools):
            return _pending(Reason.ADDRESS_NOT_ALLOWED, f"VIP pool {claim.pool!r} does not "
                            "serve this object (its serviceAllocation)", ann.VIP_POOL.field)
        if claim.pool is not None:
            return _pending(Reason.UNKNOWN_POOL, f"no VIP pool is named {claim.pool!r}",
                            ann.VIP_POOL.field)
        group = f"engine group {claim.engine_group!r}" if claim.engine_group else "no engine group"
        return _pending(Reason.POOL_EXHAUSTED, f"no VIP pool serves {group} automatically")
    picked: list[IPAddress] = []
    for family in claim.families or (None,):
        address = _pick(claim, candidates, table, family)
        if address is not None:
            table.take([address], claim)
            picked.append(address)
        elif claim.all_families:
            table.release(picked, claim)
            return _pending(Reason.POOL_EXHAUSTED, f"no free IPv{family} address in VIP pool "
                            f"{_pool_names(candidates)} (RequireDualStack needs both families)")
    if picked:
        return VipGrant(addresses=tuple(str(a) for a in picked))
    wanted = "" if claim.families == () else \
        " of family " + "/".join(f"IPv{f}" for f in claim.families)
    return _pending(Reason.POOL_EXHAUSTED, f"VIP pool {_pool_names(candidates)} has no free "
                    f"address{wanted}; the object stays pending until one is released")


def _pick(claim: Claim, candidates: list[Pool], table: _Table,
          family: int | None) -> IPAddress | None:
    """A shared address of the claim's key (first), else the first free one, of ``family``."""
    if claim.share is not None:
        for address, holders in sorted(table.holders.items(), key=lambda kv: _sort_key(kv[0])):
            if (family in (None, address.version) and holders[0].share == claim.share
                    and table.can_take(address, claim)
                    and any(address in p for p in candidates)):
                return address
    for pool in candidates:
        for r in pool.ranges:
            if family is not None and r.first.version != family:
                continue
            cls = type(r.first)
            for value in range(table.first_free.get(r, int(r.first)), int(r.last) + 1):
                address = cls(value)
                if address not in table.holders and address not in table.reserved \
                        and pool.usable(address):
                    table.first_free[r] = value
                    return address
            table.first_free[r] = int(r.last) + 1
    return None


def _pool_names(pools: list[Pool]) -> str:
    return ", ".join(p.name for p in pools)


def _sort_key(address: IPAddress) -> tuple[int, int]:
    return (address.version, int(address))


def _names(holders: list[Claim]) -> str:
    return ", ".join(str(h.ref) for h in holders)
