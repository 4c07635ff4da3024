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

import ipaddress

from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3 import endpoint_pb2

from podway.envoy.config.resource import Resource
from podway.ir import Member, MemberState

_HEALTH = {
    MemberState.READY: health_check_pb2.HEALTHY,
    MemberState.NOT_READY: health_check_pb2.UNHEALTHY,
    MemberState.DRAINING: health_check_pb2.DRAINING,
}
FALLBACK_PRIORITY = 1


def load_assignment(name: str, members: tuple[Member, ...]
                    ) -> endpoint_pb2.ClusterLoadAssignment:
    out = endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
    usable = [m for m in members if m.weight > 0]  # Envoy weights start at 1: 0 = no traffic
    main = [m for m in usable if not m.fallback]
    spare = [m for m in usable if m.fallback]
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
        # Made in place (``add``): ``append`` copies the message it is given.
        group = out.endpoints.add(priority=priority)
        if zone:
            group.locality.zone = zone
        for member in sorted(by_zone[zone], key=lambda m: (m.address, m.port)):
            endpoint = group.lb_endpoints.add(
                health_status=(health_check_pb2.HEALTHY if priority else _HEALTH[member.state]))
            endpoint.load_balancing_weight.value = member.weight
            socket = endpoint.endpoint.address.socket_address
            socket.address = member.address
            socket.port_value = member.port


# A load assignment's version names (after its content digest) a few of the members it serves:
# an engine that reconnects to a restarted Podway says, per resource, the version it holds
# (delta xDS ``initial_resource_versions``), and that is all a new Podway learns of what it
# serves. With the members in the version, make before break (``podway.envoy.xds.recall``)
# holds on to them when the new assignment replaces every one. A function of the content
# only, so equal assignments still get equal versions in every process.
SERVING_IN_VERSION = 4
_MARK = "~"
_SERVING = (health_check_pb2.HEALTHY, health_check_pb2.UNKNOWN)


def assignment_resource(name: str, assignment: endpoint_pb2.ClusterLoadAssignment,
                        members: tuple[Member, ...] | None = None,
                        held: tuple[tuple[str, int], ...] = ()) -> Resource:
    """``assignment`` as a resource whose version also names up to ``SERVING_IN_VERSION`` of
    its serving members (lowest address and port first, over every priority). ``members``:
    those it was made from (``load_assignment``), read instead of the message (cheaper).
    ``held``: an interim's departing members (``podway.envoy.xds.handover``), named in a part
    of their own and left out of the first, so an engine that reconnects holding the interim
    is known to hold them, not the new members it has maybe not checked yet."""
    if members is not None:
        serving = [(m.address, m.port) for m in members
                   if m.weight > 0 and (m.state is MemberState.READY or m.fallback)]
    else:
        serving = [(e.endpoint.address.socket_address.address,
                    e.endpoint.address.socket_address.port_value)
                   for group in assignment.endpoints for e in group.lb_endpoints
                   if e.health_status in _SERVING]
    departing = set(held)
    named = _named([key for key in serving if key not in departing])
    if held:
        named += _MARK + _named(list(held))
    return Resource.of(name, assignment, tag=f"{_MARK}{named}" if named else "")


def _named(members: list[tuple[str, int]]) -> str:
    if len(members) > 1:
        members = sorted(set(members))[:SERVING_IN_VERSION]
    return ",".join(f"[{a}]:{p}" if ":" in a else f"{a}:{p}" for a, p in members)


def serving_in_version(version: str) -> tuple[tuple[str, int], ...]:
    """The members a load assignment's version names (``assignment_resource``) as serving at
    priority 0, an interim's held members left out; () for any other version. The version
    comes from the engine: anything malformed names nothing."""
    return _parts(version)[0]


def held_in_version(version: str) -> tuple[tuple[str, int], ...]:
    """The departing members an interim's version names (``assignment_resource``'s ``held``);
    () for a version of any other assignment, or malformed."""
    return _parts(version)[1]


def _parts(version: str) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    _, mark, named = version.partition(_MARK)
    if not mark or len(named) > 2 * 64 * SERVING_IN_VERSION:
        return (), ()
    serving, held_mark, held = named.partition(_MARK)
    parsed = _parse(serving), _parse(held)
    if parsed[0] is None or parsed[1] is None or (held_mark and not parsed[1]):
        return (), ()
    return parsed[0], parsed[1]


def _parse(named: str) -> tuple[tuple[str, int], ...] | None:
    """``named``'s members, or None when malformed."""
    if not named:
        return ()
    items = named.split(",")
    if len(items) > SERVING_IN_VERSION or len(named) > 64 * SERVING_IN_VERSION:
        return None
    out: list[tuple[str, int]] = []
    for item in items:
        address, _, port = item.rpartition(":")
        address = address.removeprefix("[").removesuffix("]")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            return None
        if not port.isdigit() or not 0 < int(port) < 65536:
            return None
        out.append((address, int(port)))
    return tuple(out)
