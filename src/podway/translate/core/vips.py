"""The VIP allocation seam: what an address allocator (IPAM) hands the translator.

The translator does no I/O and decides no addresses itself. When ``TranslateOptions.vips`` holds
an allocator, the translator asks it once per snapshot for a ``VipMap`` — for every
LoadBalancer Service and Gateway that is ours, the addresses it binds, or why it has none yet —
and binds exactly those: an object missing from the map, or with an empty grant, is pending and
binds nothing (never the wildcard). An allocator must be a pure function of the snapshot and the
options (every controller replica then computes the same map; ``podway.programs.ipam`` is one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from podway.model import ObjectRef
from podway.translate.core.problems import Problem, Reason

if TYPE_CHECKING:
    from podway.model.snapshot import Snapshot
    from podway.translate.core.options import TranslateOptions


@dataclass(frozen=True, slots=True, kw_only=True)
class VipGrant:
    """The addresses one object binds, or (empty) why it is pending."""

    addresses: tuple[str, ...] = ()
    reason: Reason | None = None  # set when pending (or a request was partly refused)
    message: str = ""
    field: str = ""  # where the refused request came from, e.g. spec.loadBalancerIP

    @property
    def pending(self) -> bool:
        return not self.addresses


VipMap = Mapping[ObjectRef, VipGrant]


class VipAllocator(Protocol):
    """Gives every Service and Gateway of ``snapshot`` that is ours its addresses, and the
    shared Ingress listeners theirs (``INGRESS_LISTENERS``) when an Ingress is ours."""

    def allocate(self, snapshot: Snapshot, opts: TranslateOptions) -> VipMap: ...

    def problems(self, snapshot: Snapshot, opts: TranslateOptions) -> Sequence[Problem]:
        """What is wrong with the allocator's own inputs in ``snapshot`` (pool objects it
        cannot use), reported on those objects."""
        ...


#: The claim of the shared Ingress listeners (every Ingress that is ours is served by the same
#: HTTP and HTTPS listeners, so they share one VIP); namespace "" never names a real Ingress.
INGRESS_LISTENERS = ObjectRef("Ingress", "", "*")

NOT_ALLOCATED = VipGrant(reason=Reason.ADDRESS_NOT_ASSIGNED,
                         message="no VIP is allocated to it yet")


def grant_of(ref: ObjectRef, snapshot: Snapshot, opts: TranslateOptions) -> VipGrant | None:
    """The allocator's grant for ``ref``; None when no allocator is configured."""
    if opts.vips is None:
        return None
    return opts.vips.allocate(snapshot, opts).get(ref, NOT_ALLOCATED)
