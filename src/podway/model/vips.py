"""VIP pools as Kubernetes objects: Podway's own ``VIPPool`` and MetalLB's ``IPAddressPool``.

Both say the same thing — addresses the IPAM may hand to LoadBalancer Services and Gateways,
and who may draw from them — so they share one spec shape (MetalLB's field names, which a
MetalLB user already knows). Values the IPAM judges (address ranges) stay strings here, so a bad
one becomes a problem on the pool object instead of failing the load.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from podway.model.base import Int, K8sModel, K8sObject
from podway.model.gateway import LabelSelector

METALLB_GROUP = "metallb.io"
# MetalLB's BGP kinds are read by each engine host's speaker, not by the controller.
ANNOUNCE_METALLB = "podway vip announce-metallb on each engine host (it reads this object)"


class ServiceAllocation(K8sModel):
    """Which Services (and Gateways) may draw from the pool, and in which order of pools:
    a lower ``priority`` is tried first; 0 (unset) last."""

    priority: Int = 0
    namespaces: tuple[str, ...] = ()
    namespace_selectors: tuple[LabelSelector, ...] = ()
    service_selectors: tuple[LabelSelector, ...] = ()


class VIPPoolSpec(K8sModel):
    addresses: tuple[str, ...] = ()
    auto_assign: bool = True
    avoid_buggy_ips: bool = Field(default=False, alias="avoidBuggyIPs")
    service_allocation: ServiceAllocation | None = None
    engine_group: str | None = None  # Podway's: objects of this engine group draw from it


class VIPPool(K8sObject):
    """Podway's pool kind (cluster-scoped, ``podway.io/v1alpha1``)."""

    KIND: ClassVar[str] = "VIPPool"
    API_GROUPS: ClassVar[tuple[str, ...]] = ("podway.io",)
    NAMESPACED: ClassVar[bool] = False
    spec: VIPPoolSpec = Field(default_factory=VIPPoolSpec)


class IPAddressPoolAllocation(ServiceAllocation):
    model_config = ConfigDict(extra="allow")  # see IPAddressPoolSpec


class IPAddressPoolSpec(VIPPoolSpec):
    """MetalLB's spec keeps the fields Podway does not know (a newer MetalLB's) in
    ``model_extra``, so they are said on the object (``unknown_fields``), never ignored."""

    model_config = ConfigDict(extra="allow")
    service_allocation: IPAddressPoolAllocation | None = None

    def unknown_fields(self) -> list[str]:
        """Paths (under ``spec``) of the fields Podway does not know, sorted."""
        out = list(self.model_extra or {})
        if self.service_allocation is not None:
            out += [f"serviceAllocation.{k}" for k in self.service_allocation.model_extra or {}]
        return sorted(out)


class IPAddressPool(K8sObject):
    """MetalLB's pool kind (``metallb.io/v1beta1``), read as MetalLB defines it."""

    KIND: ClassVar[str] = "IPAddressPool"
    API_GROUPS: ClassVar[tuple[str, ...]] = (METALLB_GROUP,)
    spec: IPAddressPoolSpec = Field(default_factory=IPAddressPoolSpec)


class _MetalLBObject(K8sObject):
    """A MetalLB kind Podway does not serve from the API: read only to say so on the object
    (an event), never ignored."""

    API_GROUPS: ClassVar[tuple[str, ...]] = (METALLB_GROUP,)
    spec: dict[str, Any] = Field(default_factory=dict)
    SERVED_BY: ClassVar[str] = ""  # what to use instead


class L2Advertisement(_MetalLBObject):
    KIND: ClassVar[str] = "L2Advertisement"
    SERVED_BY: ClassVar[str] = ("podway vip l2 --from-metallb on each engine host (the chart's "
                                "reachability.mode l2)")


class BGPAdvertisement(_MetalLBObject):
    KIND: ClassVar[str] = "BGPAdvertisement"
    SERVED_BY: ClassVar[str] = ANNOUNCE_METALLB


class BGPPeer(_MetalLBObject):
    KIND: ClassVar[str] = "BGPPeer"
    SERVED_BY: ClassVar[str] = ANNOUNCE_METALLB


class Community(_MetalLBObject):
    KIND: ClassVar[str] = "Community"
    SERVED_BY: ClassVar[str] = ANNOUNCE_METALLB


class BFDProfile(_MetalLBObject):
    KIND: ClassVar[str] = "BFDProfile"
    SERVED_BY: ClassVar[str] = ANNOUNCE_METALLB
