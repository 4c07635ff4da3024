"""The kinds Podway reads: ONE table, read by the manifest loader, both sources (files and
Kubernetes), the status writer and the translator.

A row says where a kind lives in the API (group, plural, versions, scope), whether a CRD defines
it (then the Kubernetes source watches it only while the CRD exists) and whether Podway's own
chart ships that CRD, whether Podway writes its status, and its role in translation (a route, a
policy). Adding a kind — a new route kind, say — is one row here, its model (a ``K8sObject``) and
its translation; ``tests/unit/model/test_kinds.py`` checks that every row is loadable from a
manifest, watched by the Kubernetes source and known to the status writer, and that no other
module keeps a list of kinds of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from podway.model.base import K8sObject
from podway.model.bgp import VIPAdvertisement, VIPPeer
from podway.model.classconfig import GatewayClassConfig
from podway.model.core import ConfigMap, EndpointSlice, Namespace, Node, Pod, Secret, Service
from podway.model.gateway import GROUP as GATEWAY_GROUP
from podway.model.gateway import (
    BackendTLSPolicy,
    Gateway,
    GatewayClass,
    ListenerSet,
    ReferenceGrant,
)
from podway.model.gateway_routes import GRPCRoute, HTTPRoute, TCPRoute, TLSRoute, UDPRoute
from podway.model.networking import Ingress, IngressClass
from podway.model.policy import PODWAY_GROUP, BackendLBPolicy, TrafficPolicy
from podway.model.vips import (
    METALLB_GROUP,
    BFDProfile,
    BGPAdvertisement,
    BGPPeer,
    Community,
    IPAddressPool,
    L2Advertisement,
    VIPPool,
)


class Role(StrEnum):
    """What a kind is to the translator, where that is shared by several kinds."""

    NONE = ""
    ROUTE = "route"  # a Gateway API route: attaches to listeners, forwards to backends
    POLICY = "policy"  # attaches to targets; its status names ``ancestors``, not ``parents``
    NOT_SERVED = "not-served"  # read only to say on each object that Podway does not serve it


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """One row of the table."""

    model: type[K8sObject]
    group: str  # "" for the core group
    plural: str
    versions: tuple[str, ...]  # the versions the API serves it at; the first is the storage one
    namespaced: bool
    crd: bool = False  # defined by a CRD: watched only while the CRD exists
    ships_crd: bool = False  # the CRD ships with Podway (deploy/helm/podway/crds/)
    status: bool = False  # Podway writes the object's status (CRD kinds: conditions, API style)
    role: Role = Role.NONE

    @property
    def name(self) -> str:
        """The kind's name (``HTTPRoute``)."""
        return self.model.KIND

    @property
    def crd_name(self) -> str:
        """The CRD's name (``httproutes.gateway.networking.k8s.io``)."""
        return f"{self.plural}.{self.group}"

    def api_version(self, version: str | None = None) -> str:
        """``group/version`` (``version`` for the core group), at ``versions[0]`` by default."""
        version = version or self.versions[0]
        return f"{self.group}/{version}" if self.group else version


def _gateway(model: type[K8sObject], plural: str, versions: tuple[str, ...], *,
             namespaced: bool = True, status: bool = True, role: Role = Role.NONE) -> Kind:
    return Kind(model=model, group=GATEWAY_GROUP, plural=plural, versions=versions,
                namespaced=namespaced, crd=True, status=status, role=role)


TABLE: tuple[Kind, ...] = (
    Kind(model=Service, group="", plural="services", versions=("v1",), namespaced=True,
         status=True),
    Kind(model=EndpointSlice, group="discovery.k8s.io", plural="endpointslices",
         versions=("v1",), namespaced=True),
    Kind(model=Pod, group="", plural="pods", versions=("v1",), namespaced=True),
    Kind(model=Node, group="", plural="nodes", versions=("v1",), namespaced=False),
    Kind(model=Secret, group="", plural="secrets", versions=("v1",), namespaced=True),
    Kind(model=Ingress, group="networking.k8s.io", plural="ingresses", versions=("v1",),
         namespaced=True, status=True),
    Kind(model=IngressClass, group="networking.k8s.io", plural="ingressclasses",
         versions=("v1",), namespaced=False),
    Kind(model=ConfigMap, group="", plural="configmaps", versions=("v1",), namespaced=True),
    Kind(model=Namespace, group="", plural="namespaces", versions=("v1",), namespaced=False),
    _gateway(GatewayClass, "gatewayclasses", ("v1", "v1beta1"), namespaced=False),
    _gateway(Gateway, "gateways", ("v1", "v1beta1")),
    _gateway(ListenerSet, "listenersets", ("v1",)),
    _gateway(HTTPRoute, "httproutes", ("v1", "v1beta1"), role=Role.ROUTE),
    _gateway(GRPCRoute, "grpcroutes", ("v1",), role=Role.ROUTE),
    _gateway(TLSRoute, "tlsroutes", ("v1alpha2",), role=Role.ROUTE),
    _gateway(TCPRoute, "tcproutes", ("v1alpha2",), role=Role.ROUTE),
    _gateway(UDPRoute, "udproutes", ("v1alpha2",), role=Role.ROUTE),
    _gateway(ReferenceGrant, "referencegrants", ("v1beta1",), status=False),
    _gateway(BackendTLSPolicy, "backendtlspolicies", ("v1alpha3",), role=Role.POLICY),
    _gateway(BackendLBPolicy, "backendlbpolicies", ("v1alpha2",), role=Role.POLICY),
    Kind(model=TrafficPolicy, group=PODWAY_GROUP, plural="trafficpolicies",
         versions=("v1alpha1",), namespaced=True, crd=True, ships_crd=True, status=True,
         role=Role.POLICY),
    # GatewayClass parameters (spec.parametersRef; translate/gateway/parameters.py).
    Kind(model=GatewayClassConfig, group=PODWAY_GROUP, plural="gatewayclassconfigs",
         versions=("v1alpha1",), namespaced=False, crd=True, ships_crd=True),
    # VIP pools for the IPAM (read by the controller with --vip-pools-from; docs/vips.md).
    # Their status (addresses assigned and available) is the controller's: status_pools.py.
    Kind(model=VIPPool, group=PODWAY_GROUP, plural="vippools", versions=("v1alpha1",),
         namespaced=False, crd=True, ships_crd=True, status=True),
    # Podway's own BGP kinds, read by each engine host's speaker (podway vip announce-metallb),
    # which writes a VIPPeer's per-node session state (programs/vip/podway_bgp_status.py).
    Kind(model=VIPPeer, group=PODWAY_GROUP, plural="vippeers", versions=("v1alpha1",),
         namespaced=False, crd=True, ships_crd=True),
    Kind(model=VIPAdvertisement, group=PODWAY_GROUP, plural="vipadvertisements",
         versions=("v1alpha1",), namespaced=False, crd=True, ships_crd=True),
    Kind(model=IPAddressPool, group=METALLB_GROUP, plural="ipaddresspools",
         versions=("v1beta1",), namespaced=True, crd=True, status=True),
    # MetalLB's other kinds, read with --vip-pools-from metallb only to say on each that Podway
    # does not serve it from the API (programs/ipam/objects.py).
    Kind(model=L2Advertisement, group=METALLB_GROUP, plural="l2advertisements",
         versions=("v1beta1",), namespaced=True, crd=True, role=Role.NOT_SERVED),
    Kind(model=BGPAdvertisement, group=METALLB_GROUP, plural="bgpadvertisements",
         versions=("v1beta1",), namespaced=True, crd=True, role=Role.NOT_SERVED),
    Kind(model=BGPPeer, group=METALLB_GROUP, plural="bgppeers", versions=("v1beta2", "v1beta1"),
         namespaced=True, crd=True, role=Role.NOT_SERVED),
    Kind(model=Community, group=METALLB_GROUP, plural="communities", versions=("v1beta1",),
         namespaced=True, crd=True, role=Role.NOT_SERVED),
    Kind(model=BFDProfile, group=METALLB_GROUP, plural="bfdprofiles", versions=("v1beta1",),
         namespaced=True, crd=True, role=Role.NOT_SERVED),
)

BY_NAME: dict[str, Kind] = {k.name: k for k in TABLE}
KINDS: dict[str, type[K8sObject]] = {k.name: k.model for k in TABLE}  # kind name → model
CRDS: tuple[Kind, ...] = tuple(k for k in TABLE if k.crd)
STATUS_KINDS: frozenset[str] = frozenset(k.name for k in TABLE if k.status)
# Status in the Gateway API's form (conditions with observedGeneration): whether the object is
# accepted is read from it.
CRD_STATUS_KINDS: frozenset[str] = frozenset(k.name for k in CRDS if k.status)
ROUTE_MODELS: tuple[type[K8sObject], ...] = tuple(k.model for k in TABLE if k.role is Role.ROUTE)
POLICY_KINDS: frozenset[str] = frozenset(k.name for k in TABLE if k.role is Role.POLICY)
NOT_SERVED_MODELS: tuple[type[K8sObject], ...] = tuple(k.model for k in TABLE
                                                       if k.role is Role.NOT_SERVED)
# Read by each engine host's BGP speaker (podway vip announce-metallb) in MetalLB's namespace.
METALLB_SPEAKER_KINDS: tuple[Kind, ...] = tuple(
    k for k in TABLE if k.group == METALLB_GROUP and k.model is not L2Advertisement)
# Podway's own kinds the same speaker reads (cluster-scoped): peers, advertisements, pools.
PODWAY_SPEAKER_KINDS: tuple[Kind, ...] = tuple(
    k for k in TABLE if k.model in (VIPPeer, VIPAdvertisement, VIPPool))
# The speaker maps Podway's objects onto MetalLB's kind that means the same (a VIPPeer's BFD
# settings onto a BFDProfile): MetalLB's kind → the Podway kind a problem is said of.
PODWAY_FOR_METALLB: dict[str, str] = {
    BGPPeer.KIND: VIPPeer.KIND, BGPAdvertisement.KIND: VIPAdvertisement.KIND,
    IPAddressPool.KIND: VIPPool.KIND, BFDProfile.KIND: VIPPeer.KIND}


def api_group(api_version: str) -> str:
    """``networking.k8s.io/v1`` → ``networking.k8s.io``; ``v1`` → ``""`` (the core group)."""
    return api_version.rpartition("/")[0]
