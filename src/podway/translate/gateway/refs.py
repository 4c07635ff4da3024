"""Cross-namespace references: ReferenceGrant checks and Service backendRef resolution.

A reference into another namespace is allowed only when a ReferenceGrant *in the target
namespace* lists the referrer (group, kind, namespace) in ``from`` and the target (group, kind,
optionally name) in ``to``. A backendRef resolves to a ``PoolSpec`` or to a ``RefIssue`` whose
reason is the Gateway API ``ResolvedRefs`` reason; the caller answers that share with HTTP 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from podway.ir import PoolProtocol, PoolSettings, UpstreamTLS
from podway.model import Service
from podway.model.gateway import ReferenceGrant
from podway.model.gateway_routes import BackendObjectReference
from podway.model.snapshot import Snapshot
from podway.translate.core.problems import Reason, quote
from podway.translate.pools.backends import PoolSpec, find_port, http_pool, l4_pool


@dataclass(frozen=True, slots=True)
class RefIssue:
    reason: Reason
    message: str


class ReferenceGrants:
    """Every ReferenceGrant, indexed by the namespace it grants access into."""

    __slots__ = ("_by_namespace",)

    def __init__(self, grants: Mapping[tuple[str, str], ReferenceGrant]) -> None:
        self._by_namespace: dict[str, list[ReferenceGrant]] = {}
        for (ns, _), grant in sorted(grants.items()):
            self._by_namespace.setdefault(ns, []).append(grant)

    def permits(self, *, from_group: str, from_kind: str, from_namespace: str, to_group: str,
                to_kind: str, to_namespace: str, to_name: str) -> bool:
        """Same namespace always; otherwise only with a matching grant in ``to_namespace``."""
        if from_namespace == to_namespace:
            return True
        for grant in self._by_namespace.get(to_namespace, ()):
            if not any(f.group == from_group and f.kind == from_kind
                       and f.namespace == from_namespace for f in grant.spec.from_):
                continue
            if any(t.group == to_group and t.kind == to_kind and t.name in (None, "", to_name)
                   for t in grant.spec.to):
                return True
        return False


# How a route kind wants its backend: pool flavour and the transport the Service port must use.
FLAVOURS = {"http": "TCP", "grpc": "TCP", "tls": "TCP", "tcp": "TCP", "udp": "UDP"}


@dataclass(frozen=True, slots=True)
class Referrer:
    group: str
    kind: str
    namespace: str


def resolve_backend(ref: BackendObjectReference, *, referrer: Referrer, flavour: str,
                    snapshot: Snapshot, grants: ReferenceGrants,
                    upstream_tls: Mapping[tuple[str, str, str], UpstreamTLS | RefIssue]
                    ) -> PoolSpec | RefIssue:
    """A backendRef → the pool it names, or why it cannot be used.

    ``upstream_tls`` maps (namespace, service, port name) to the BackendTLSPolicy outcome;
    a policy whose CA cannot be resolved makes the backend unusable (fail closed).
    """
    if ref.group != "" or ref.kind != "Service":
        kind = quote(f"{ref.group}/{ref.kind}" if ref.group else ref.kind)
        return RefIssue(Reason.INVALID_KIND,
                        f"backendRef kind {kind} is not supported (core Service)")
    ns = ref.namespace or referrer.namespace
    if not grants.permits(from_group=referrer.group, from_kind=referrer.kind,
                          from_namespace=referrer.namespace, to_group="", to_kind="Service",
                          to_namespace=ns, to_name=ref.name):
        return RefIssue(Reason.REF_NOT_PERMITTED,
                        f"Service {ns}/{ref.name} is in another namespace and no ReferenceGrant "
                        f"in {ns} allows {referrer.kind}s from {referrer.namespace}")
    service = snapshot.get(Service, ns, ref.name)
    if service is None:
        return RefIssue(Reason.BACKEND_NOT_FOUND, f"Service {ns}/{ref.name} not found")
    if ref.port is None:
        return RefIssue(Reason.BACKEND_NOT_FOUND,
                        f"backendRef to Service {ns}/{ref.name} has no port")
    if service.spec.type == "ExternalName":
        return RefIssue(Reason.UNSUPPORTED_VALUE,
                        f"Service {ns}/{ref.name} is of type ExternalName")
    transport = FLAVOURS[flavour]
    # A Service may use one port number for TCP and UDP: prefer the wanted transport.
    port = next((p for p in service.spec.ports if p.port == ref.port and p.protocol == transport),
                None) or find_port(service, number=ref.port)
    if port is None:
        return RefIssue(Reason.BACKEND_NOT_FOUND, f"Service {ns}/{ref.name} has no port {ref.port}")
    if port.protocol != transport:
        return RefIssue(Reason.UNSUPPORTED_PROTOCOL,
                        f"Service {ns}/{ref.name} port {port.port} is {port.protocol}, "
                        f"not {transport}")
    if flavour in ("tls", "tcp", "udp"):
        return l4_pool(service, port)
    spec = http_pool(service, port)
    if flavour == "grpc" and spec.settings.protocol is not PoolProtocol.GRPC:
        # A pool a GRPCRoute reaches carries gRPC whatever appProtocol says (HTTP/2 upstream,
        # and a health check that speaks gRPC: an h2c pool's ``GET /`` is reset by grpcio and
        # would take every member out). A distinct name keeps the HTTP/1 or h2c pool of the
        # same port (Ingress, HTTPRoute) unchanged.
        spec = replace(spec, name=f"{spec.name}/grpc",
                       settings=replace(spec.settings, protocol=PoolProtocol.GRPC))
    tls = upstream_tls.get((ns, ref.name, port.name)) or upstream_tls.get((ns, ref.name, ""))
    if isinstance(tls, RefIssue):
        return tls
    if tls is not None:
        settings: PoolSettings = replace(spec.settings, upstream_tls=tls)
        spec = replace(spec, name=f"{spec.name}/tls", settings=settings)
    return spec
