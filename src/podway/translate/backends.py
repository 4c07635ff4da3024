"""Backends: a Service port becomes a pool; the backend mode decides its members.

Route translation only asks for a pool *name* (``PoolSpec``); members are resolved afterwards,
per pool, by a ``MemberResolver``. That split is what makes endpoint changes incremental: a
changed EndpointSlice re-resolves the pools of its Service and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from podway.ir import Member, MemberState, PoolProtocol, PoolSettings
from podway.model import EndpointSlice, ObjectRef, Service
from podway.model.core import ServicePort
from podway.model.snapshot import Key

ServiceKey = Key  # (namespace, name) of a Service


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpec:
    """What a pool is made of, before members are known."""

    name: str
    service: ServiceKey
    port: ServicePort
    settings: PoolSettings
    origin: ObjectRef


_APP_PROTOCOLS = {
    "kubernetes.io/h2c": PoolProtocol.HTTP2,
    "h2c": PoolProtocol.HTTP2,
    "http2": PoolProtocol.HTTP2,
    "grpc": PoolProtocol.GRPC,
    "kubernetes.io/grpc": PoolProtocol.GRPC,
}


def http_pool(service: Service, port: ServicePort) -> PoolSpec:
    """The L7 pool of one Service port; ``appProtocol`` picks HTTP/2 or gRPC upstream."""
    ns, name = service.key
    protocol = _APP_PROTOCOLS.get((port.app_protocol or "").lower(), PoolProtocol.HTTP1)
    return PoolSpec(name=f"pool/{ns}/{name}/{port.port}", service=service.key, port=port,
                    settings=PoolSettings(protocol=protocol), origin=service.ref)


def l4_pool(service: Service, port: ServicePort) -> PoolSpec:
    """The L4 pool of one Service port (TCP or UDP)."""
    ns, name = service.key
    protocol = PoolProtocol.UDP if port.protocol == "UDP" else PoolProtocol.TCP
    return PoolSpec(name=f"pool/{ns}/{name}/{port.port}/{protocol.value}", service=service.key,
                    port=port, settings=PoolSettings(protocol=protocol), origin=service.ref)


def find_port(service: Service, *, number: int | None = None, name: str | None = None
              ) -> ServicePort | None:
    for port in service.spec.ports:
        if (number is not None and port.port == number) or (name is not None and port.name == name):
            return port
    return None


class MemberResolver(Protocol):
    """Resolves the members of one pool from an endpoint index. Pure."""

    def members(self, spec: PoolSpec, index: EndpointIndex) -> tuple[Member, ...]: ...


class EndpointIndex:
    """EndpointSlices grouped by Service, kept up to date one slice at a time."""

    __slots__ = ("_by_service", "_service_of")

    def __init__(self, slices: Iterable[EndpointSlice] = ()) -> None:
        self._by_service: dict[ServiceKey, dict[Key, EndpointSlice]] = {}
        self._service_of: dict[Key, ServiceKey] = {}
        for item in slices:
            self.put(item.key, item)

    def put(self, key: Key, item: EndpointSlice | None) -> ServiceKey | None:
        """Insert, replace or (``None``) delete one slice; returns the Service it belonged to."""
        old_service = self._service_of.pop(key, None)
        if old_service is not None:
            self._by_service[old_service].pop(key, None)
        if item is None or item.service_name is None:
            return old_service
        service = (item.metadata.namespace, item.service_name)
        self._by_service.setdefault(service, {})[key] = item
        self._service_of[key] = service
        return old_service

    def slices(self, service: ServiceKey) -> Mapping[Key, EndpointSlice]:
        return self._by_service.get(service, {})


class ClusterIPResolver:
    """``clusterip`` mode: members are PodIP:port straight from the Service's EndpointSlices."""

    def members(self, spec: PoolSpec, index: EndpointIndex) -> tuple[Member, ...]:
        found: dict[tuple[str, int], Member] = {}
        want_name = spec.port.name or ""
        for item in index.slices(spec.service).values():
            if item.address_type == "FQDN":
                continue
            port = next((p.port for p in item.ports if (p.name or "") == want_name
                         and p.protocol == spec.port.protocol and p.port is not None), None)
            if port is None:
                continue
            for endpoint in item.endpoints:
                state = _state(endpoint.conditions.ready, endpoint.conditions.terminating)
                target = endpoint.target_ref
                origin = (ObjectRef(target.kind or "Pod", target.namespace or spec.service[0],
                                    target.name) if target is not None and target.name else None)
                for address in endpoint.addresses:
                    previous = found.get((address, port))
                    # Duplicates across slices happen during moves; the most useful state wins.
                    if previous is not None and _RANK[previous.state] <= _RANK[state]:
                        continue
                    found[(address, port)] = Member(address=address, port=port, state=state,
                                                    origin=origin, node=endpoint.node_name,
                                                    zone=endpoint.zone)
        return tuple(found[k] for k in sorted(found))


_RANK = {MemberState.READY: 0, MemberState.DRAINING: 1, MemberState.NOT_READY: 2}


def _state(ready: bool | None, terminating: bool | None) -> MemberState:
    if terminating:
        return MemberState.DRAINING
    if ready is False:
        return MemberState.NOT_READY
    return MemberState.READY  # Kubernetes: an unset ready condition means ready
