"""Cluster load assignments (EDS): a pool's members, the only resource an endpoint change touches.

Member states map to Envoy health: ``ready`` → HEALTHY, ``not_ready`` → UNHEALTHY (kept for
visibility, gets nothing), ``draining`` → DRAINING (no new requests; in-flight ones finish).
Members are grouped by zone (an Envoy locality) and sorted, so equal member sets give equal bytes.

A draining member that still serves (``Member.serving``: a terminating pod in a rollout) is the
pool's fallback: it goes to priority 1 as HEALTHY, the others stay at priority 0. Envoy sends a
request to priority 1 only while priority 0 has no healthy member *in its own view*, which is
what a rollout needs: Kubernetes calls a new pod ready before Envoy has checked it once (a new
member of an actively checked pool gets nothing until its first check passes), so the old pods
carry the traffic until then and get nothing new after. The overprovisioning factor is raised so
that one healthy member at priority 0 takes all of it (Envoy's default, 1.4, would spill part of
the traffic to priority 1 whenever fewer than 71 % of priority 0 is healthy).
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
FALLBACK_PRIORITY = 1


def fallback(member: Member) -> bool:
    """A draining member that still serves: priority 1 (see the module docstring)."""
    return member.state is MemberState.DRAINING and member.serving


def load_assignment(name: str, members: tuple[Member, ...]
                    ) -> endpoint_pb2.ClusterLoadAssignment:
    out = endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
    usable = [m for m in members if m.weight > 0]  # Envoy weights start at 1: 0 = no traffic
    main = [m for m in usable if not fallback(m)]
    spare = [m for m in usable if fallback(m)]
    _groups(out, main, priority=0)
    if spare:
        _groups(out, spare, priority=FALLBACK_PRIORITY)
        # Envoy's share of priority 0 is min(100, healthy % x factor / 100): with the factor at
        # 100 x its member count, one healthy member there is enough for all of the traffic.
        out.policy.overprovisioning_factor.value = 100 * max(len(main), 1)
    return out


def _groups(out: endpoint_pb2.ClusterLoadAssignment, members: list[Member], *,
            priority: int) -> None:
    by_zone: dict[str, list[Member]] = {}
    for member in members:
        by_zone.setdefault(member.zone or "", []).append(member)
    for zone in sorted(by_zone):
        group = ec.LocalityLbEndpoints(priority=priority)
        if zone:
            group.locality.zone = zone
        for member in sorted(by_zone[zone], key=lambda m: (m.address, m.port)):
            endpoint = ec.LbEndpoint(
                health_status=(health_check_pb2.HEALTHY if priority else _HEALTH[member.state]),
                load_balancing_weight=wrappers_pb2.UInt32Value(value=member.weight))
            socket = endpoint.endpoint.address.socket_address
            socket.address = member.address
            socket.port_value = member.port
            group.lb_endpoints.append(endpoint)
        out.endpoints.append(group)
