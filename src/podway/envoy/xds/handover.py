"""Make before break when a load assignment replaces every member that was serving.

Envoy treats a member that EDS adds to an actively checked cluster as failed until its first
check passes; the members it replaces leave at the same moment. With the panic threshold at 0
(never send traffic to failing members) such a pool has no member to send to until the first
check of a new one passes: a connect or a request away at best, an ``unhealthy_interval`` when
that first check fails because the new member is not listening yet.

So when an assignment would drop every member that is serving now (``HEALTHY`` in the served
assignment and absent from the new one) while it brings serving members of its own, the engine
first gets an *interim* assignment: the new one, plus the departing members in a group of
priority 1. Envoy sends a priority-1 member traffic only while priority 0 lacks healthy members,
so the departing members carry the pool until the new ones pass their first check, and no
longer. After a hold bounded by the cluster's own check timing (``hold_s``), the final
assignment follows.

Invariants: the interim holds every member of the new assignment unchanged at priority 0; a
member the new assignment lists (not ready, draining) is never held back in priority 1; nothing
is held for a cluster without active checks (there is no gap to bridge) nor when the new
assignment has no serving member (an emptied pool is the truth, not a change to bridge); the
interim's overprovisioning factor is 100 x its priority-0 members, so the held members get
traffic only while priority 0 has no healthy member (with Envoy's default, 1.4, priority 1 took
a share whenever fewer than 71 % of priority 0 were healthy: 30 % in a rollout's step).

A change inside a hold (``carries``): while it only adds to the assignment the hold stands for
(a member turning ready, one more pod), the hold's own departing members stay held beside the
newer members, to the hold's first end: the interim's new members may be unchecked, so
comparing with the interim would end the hold and leave only those. Any other change (a member
leaves, starts draining, a pod went: it may be the one behind a held member) is compared with
the interim as served, as before. The functions are pure; the timing lives in
``podway.envoy.xds.cache`` and ``podway.envoy.xds.recall``.

A rollout is not bridged here: its old pods stay listed (terminating) while the new ones turn
ready, so nothing departs; the load assignment itself makes those still serving the pool's
fallback at priority 1 (``podway.envoy.config.endpoints``), for as long as they are listed.
"""

from __future__ import annotations

from collections.abc import Iterable

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2 as ec
from envoy.config.endpoint.v3 import endpoint_pb2

HOLD_CAP_S = 30.0
_SERVING = (health_check_pb2.HEALTHY, health_check_pb2.UNKNOWN)


def _key(endpoint: ec.LbEndpoint) -> tuple[str, int]:
    socket = endpoint.endpoint.address.socket_address
    return socket.address, socket.port_value


def _serving(assignment: endpoint_pb2.ClusterLoadAssignment) -> dict[tuple[str, int],
                                                                       ec.LbEndpoint]:
    return {_key(e): e for group in assignment.endpoints for e in group.lb_endpoints
            if e.health_status in _SERVING}


def departing(served: endpoint_pb2.ClusterLoadAssignment,
              new: endpoint_pb2.ClusterLoadAssignment) -> list[ec.LbEndpoint]:
    """The serving members of ``served`` to hold back, or [] when ``new`` keeps one of them
    serving, has no serving member of its own, or drops nothing."""
    before = _serving(served)
    after = _serving(new)
    if not before or not after or before.keys() & after.keys():
        return []
    listed = {_key(e) for group in new.endpoints for e in group.lb_endpoints}
    return [before[key] for key in sorted(before) if key not in listed]


def carries(final: endpoint_pb2.ClusterLoadAssignment,
            newer: endpoint_pb2.ClusterLoadAssignment) -> bool:
    """Whether ``newer``, arriving inside the hold of ``final``, only adds to it: every member
    of ``final`` still listed at its priority with its health, or turned from not ready to
    serving or from serving to not ready (a readiness flip: its pod is still there and not
    terminating). Then nothing that ``final`` lists has left or started draining, so the hold
    goes on with its own departing members (``departing(members(held), newer)``); ending it
    on a flip would leave a pool whose serving members are all unchecked."""
    after = {_key(e): (group.priority, e.health_status)
             for group in newer.endpoints for e in group.lb_endpoints}
    for group in final.endpoints:
        for endpoint in group.lb_endpoints:
            now = after.get(_key(endpoint))
            if now is None:
                return False
            if now != (group.priority, endpoint.health_status) and not (
                    now[0] == group.priority and _flipped(endpoint.health_status, now[1])):
                return False
    return True


def _flipped(before: int, after: int) -> bool:
    """A readiness flip either way between not ready and serving (not draining)."""
    unhealthy = health_check_pb2.UNHEALTHY
    return (before == unhealthy and after in _SERVING) or (
        before in _SERVING and after == unhealthy)


def members(held: Iterable[ec.LbEndpoint | tuple[str, int]]
            ) -> endpoint_pb2.ClusterLoadAssignment:
    """``held`` (endpoints, or address and port) as one group of serving members."""
    out = endpoint_pb2.ClusterLoadAssignment()
    group = out.endpoints.add()
    for member in held:
        endpoint = group.lb_endpoints.add()
        if isinstance(member, ec.LbEndpoint):
            endpoint.CopyFrom(member)
        else:
            endpoint.endpoint.address.socket_address.address = member[0]
            endpoint.endpoint.address.socket_address.port_value = member[1]
        endpoint.health_status = health_check_pb2.HEALTHY
    return out


def keys(members: list[ec.LbEndpoint]) -> tuple[tuple[str, int], ...]:
    """Address and port of each of ``members``."""
    return tuple(_key(e) for e in members)


def interim(new: endpoint_pb2.ClusterLoadAssignment, held: list[ec.LbEndpoint]
            ) -> endpoint_pb2.ClusterLoadAssignment:
    """``new`` with ``held`` added as one group of priority 1, which gets traffic only while
    priority 0 has no healthy member."""
    out = endpoint_pb2.ClusterLoadAssignment()
    out.CopyFrom(new)
    main = sum(len(g.lb_endpoints) for g in out.endpoints if g.priority == 0)
    out.policy.overprovisioning_factor.value = 100 * max(main, 1)
    group = out.endpoints.add(priority=1)
    for endpoint in held:
        group.lb_endpoints.add().CopyFrom(endpoint)
        group.lb_endpoints[-1].health_status = health_check_pb2.HEALTHY
    return out


def hold_s(cluster: cluster_pb2.Cluster | None) -> float | None:
    """How long departing members stay: two checks of a new member (the immediate first one
    and, should it fail, one retry after ``unhealthy_interval`` and at most its jitter), each
    with its timeout; None for a cluster without active checks."""
    if cluster is None or not cluster.health_checks:
        return None
    check = cluster.health_checks[0]
    retry = check.unhealthy_interval if check.HasField("unhealthy_interval") else check.interval
    jittered = retry.ToMilliseconds() * (100 + check.interval_jitter_percent) / 100
    one = check.timeout.ToMilliseconds() + jittered
    return min(2.0 * float(one) / 1000, HOLD_CAP_S)
