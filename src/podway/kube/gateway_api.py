"""Names of the Gateway API kinds Podway reads: group, plural, scope, the versions upstream
serves them at (standard and experimental channels), and which served version to prefer.

Shared by the Kubernetes source (which kinds to watch once their CRD exists) and the emulator
(which CRDs to install). Data only.
"""

from __future__ import annotations

import re

GROUP = "gateway.networking.k8s.io"

# kind -> (plural, namespaced, versions upstream serves; the first is the storage version)
KINDS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "GatewayClass": ("gatewayclasses", False, ("v1", "v1beta1")),
    "Gateway": ("gateways", True, ("v1", "v1beta1")),
    "HTTPRoute": ("httproutes", True, ("v1", "v1beta1")),
    "GRPCRoute": ("grpcroutes", True, ("v1",)),
    "ReferenceGrant": ("referencegrants", True, ("v1beta1",)),
    "TLSRoute": ("tlsroutes", True, ("v1alpha2",)),
    "TCPRoute": ("tcproutes", True, ("v1alpha2",)),
    "UDPRoute": ("udproutes", True, ("v1alpha2",)),
    "BackendTLSPolicy": ("backendtlspolicies", True, ("v1alpha3",)),
}

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_rank(version: str) -> tuple[int, int, int]:
    """Kubernetes version priority: GA > beta > alpha, then by number (v1 > v1beta2 > v1alpha3)."""
    match = _VERSION.match(version)
    if match is None:
        return (-1, 0, 0)
    stage = {"alpha": 0, "beta": 1, None: 2}[match[2]]
    return (stage, int(match[1]), int(match[3] or 0))


def preferred(versions: list[str]) -> str | None:
    """The most stable of the served versions."""
    return max(versions, key=version_rank) if versions else None


def crd_name(kind: str) -> str:
    return f"{KINDS[kind][0]}.{GROUP}"
