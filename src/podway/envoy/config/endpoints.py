"""Cluster load assignments (EDS): a pool's members, the only resource an endpoint change touches.

Member states map to Envoy health: ``ready`` → HEALTHY, ``not_ready`` → UNHEALTHY (kept for
visibility, gets nothing), ``draining`` → DRAINING (no new requests; in-flight ones finish).
Members are grouped by zone (an Envoy locality) and sorted, so equal member sets give equal bytes.
"""

from __future__ import annotations

from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2 as ec
from envoy.config.endpoint.v3 import endpoint_pb2
from google.protobuf import wrappers_pb2

from podway.ir import Member, MemberState

_HEALTH = {
    MemberState.READY: health_check_pb2.HEALTHY,
    MemberState.NOT_READY: health_check_pb2.UNHEALTHY,
    MemberState.DRAINING: health_check_pb2.DRAINING,
}


def load_assignment(name: str, members: tuple[Member, ...]
                    ) -> endpoint_pb2.ClusterLoadAssignment:
    out = endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
    by_zone: dict[str, list[Member]] = {}
    for member in members:
        if member.weight <= 0:
            continue  # Envoy weights start at 1; a zero-weight member gets no traffic at all
        by_zone.setdefault(member.zone or "", []).append(member)
    for zone in sorted(by_zone):
        group = ec.LocalityLbEndpoints()
        if zone:
            group.locality.zone = zone
        for member in sorted(by_zone[zone], key=lambda m: (m.address, m.port)):
            endpoint = ec.LbEndpoint(
                health_status=_HEALTH[member.state],
                load_balancing_weight=wrappers_pb2.UInt32Value(value=member.weight))
            socket = endpoint.endpoint.address.socket_address
            socket.address = member.address
            socket.port_value = member.port
            group.lb_endpoints.append(endpoint)
        out.endpoints.append(group)
    return out
