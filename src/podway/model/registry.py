"""Which Kubernetes kinds Podway models, keyed by kind name.

Adding a kind is one line in ``KINDS``; the loader, the snapshot and the sources pick it up.
"""

from __future__ import annotations

from podway.model.base import K8sObject
from podway.model.core import ConfigMap, EndpointSlice, Namespace, Node, Pod, Secret, Service
from podway.model.gateway import BackendTLSPolicy, Gateway, GatewayClass, ReferenceGrant
from podway.model.gateway_routes import GRPCRoute, HTTPRoute, TCPRoute, TLSRoute, UDPRoute
from podway.model.networking import Ingress, IngressClass
from podway.model.policy import BackendLBPolicy, TrafficPolicy

KINDS: dict[str, type[K8sObject]] = {
    cls.KIND: cls
    for cls in (Service, EndpointSlice, Pod, Node, Secret, Ingress, IngressClass,
                ConfigMap, Namespace, GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute,
                TCPRoute, UDPRoute, ReferenceGrant, BackendTLSPolicy, BackendLBPolicy,
                TrafficPolicy)
}


def api_group(api_version: str) -> str:
    """``networking.k8s.io/v1`` → ``networking.k8s.io``; ``v1`` → ``""`` (the core group)."""
    return api_version.rpartition("/")[0]
