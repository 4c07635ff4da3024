"""Podway's VIP address management: pools from configuration, one allocation per LoadBalancer
Service and Gateway, recovered from the objects' status (no store of its own).

``Ipam`` is the allocator the translator takes (``TranslateOptions.vips``): a pure function of
the snapshot, so every controller replica computes the same map and only the leader's status
writes make it visible (``status.loadBalancer.ingress``, Gateway ``status.addresses``); after a
restart those statuses are read back as what each object holds. See ``docs/vips.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from podway.model.base import ObjectRef
from podway.model.snapshot import Snapshot
from podway.programs.ipam.allocate import allocate
from podway.programs.ipam.claims import Claim, HeldSource, claims_of, held_in_status
from podway.programs.ipam.objects import METALLB_NAMESPACE, ObjectPools, PoolKinds, pools_of
from podway.programs.ipam.pools import AddressRange, Pool, load_pools, parse_pools, parse_range
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Problem
from podway.translate.core.vips import VipGrant, VipMap

__all__ = ["AddressRange", "Claim", "HeldSource", "Ipam", "Pool", "PoolKinds", "VipGrant",
           "allocate", "claims_of", "controller_ipam", "held_in_status", "load_pools",
           "parse_pools", "parse_range", "pools_of"]


@dataclass(frozen=True, slots=True)
class Ipam:
    """The allocator over ``pools``. The translator asks once per object kind and snapshot; the
    last answer is kept for the same snapshot object (snapshots are immutable).

    What an object holds comes from ``held`` (the controller: the API's status, kept aside by
    its source), else from the object's status; when neither shows anything yet (the status
    write has not landed), from this allocator's previous answer, so a release elsewhere never
    moves an address whose status is still on its way.
    """

    pools: tuple[Pool, ...]
    held: HeldSource | None = field(default=None, compare=False, hash=False)
    kinds: tuple[PoolKinds, ...] = ()  # pool objects read besides ``pools`` (objects.py)
    metallb_namespace: str = METALLB_NAMESPACE
    _last: list[tuple[Snapshot, TranslateOptions, VipMap]] = field(
        default_factory=list, compare=False, hash=False, repr=False)
    _read: list[tuple[Snapshot, ObjectPools]] = field(
        default_factory=list, compare=False, hash=False, repr=False)

    def allocate(self, snapshot: Snapshot, opts: TranslateOptions) -> VipMap:
        if self._last and self._last[0][0] is snapshot and self._last[0][1] is opts:
            return self._last[0][2]
        previous = self._last[0][2] if self._last else {}
        claims = [c if c.held or c.ref not in previous else
                  replace(c, held=previous[c.ref].addresses)
                  for c in claims_of(snapshot, opts, self.held)]
        result = allocate(claims, self.pools_in(snapshot, opts, claims).pools)
        self._last[:] = [(snapshot, opts, result)]
        return result

    def grants(self, snapshot: Snapshot, opts: TranslateOptions) -> VipMap:
        """The allocation of ``snapshot``: the answer already given for it (whatever options
        the translator asked with), else ``allocate``."""
        if self._last and self._last[0][0] is snapshot:
            return self._last[0][2]
        return self.allocate(snapshot, opts)

    def problems(self, snapshot: Snapshot, opts: TranslateOptions) -> Sequence[Problem]:
        return self.pools_in(snapshot, opts).problems

    def pools_in(self, snapshot: Snapshot, opts: TranslateOptions,
                 claims: Sequence[Claim] | None = None) -> ObjectPools:
        """The pools in use for ``snapshot``: the configured ones, then its pool objects'
        (``claims``: the snapshot's, when the caller has them)."""
        if not self.kinds:
            return ObjectPools(self.pools)
        if not self._read or self._read[0][0] is not snapshot:
            if claims is None:
                claims = claims_of(snapshot, opts, self.held)
            in_use = {a for c in claims for a in c.held}
            self._read[:] = [(snapshot, pools_of(snapshot, self.pools, self.kinds,
                                                 metallb_namespace=self.metallb_namespace,
                                                 in_use=in_use))]
        return self._read[0][1]


StatusOf = Callable[[str, tuple[str, str]], "Mapping[str, Any] | None"]


def controller_ipam(pools: tuple[Pool, ...], kinds: tuple[PoolKinds, ...],
                    metallb_namespace: str, status_of: StatusOf) -> Ipam | None:
    """The controller's IPAM (None: no pools configured, no pool objects read): what each
    object holds is read from the status the API holds for it (``status_of(kind, key)``)."""
    if not pools and not kinds:
        return None

    def held(ref: ObjectRef) -> tuple[str, ...] | None:
        return held_in_status(ref.kind, status_of(ref.kind, (ref.namespace, ref.name)))

    return Ipam(pools, held=held, kinds=kinds, metallb_namespace=metallb_namespace)
