"""TLSRoute, TCPRoute and UDPRoute → weighted L4 backends.

These kinds have no matches: a rule is a set of weighted backendRefs, and the backendRefs of
every rule form one weighted set (the same pool in two rules adds its weights). TCP and TLS
split connections by weight, UDP datagrams too (the engine serves the weighted pools of a UDP
listener as one split cluster: ``podway.envoy.config.split``). TLS listeners
in Passthrough mode: the engine reads SNI, picks the route by hostname and forwards the bytes
without decrypting; in Terminate mode it decrypts first. A TCP or UDP listener forwards every
connection (datagram) to one route: the oldest attached route wins and the others are told so in
their status. An unresolvable backend keeps its weight with ``pool=None``: the engine refuses
that share of connections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import WeightedPool
from podway.model.gateway_routes import TCPRoute, TLSRoute, UDPRoute
from podway.translate.core.problems import Reason
from podway.translate.gateway.httproute import Issue, Resolve, weighted_shares
from podway.translate.gateway.refs import RefIssue
from podway.translate.pools.backends import PoolSpec

L4Kind = TLSRoute | TCPRoute | UDPRoute


@dataclass(slots=True)
class CompiledL4:
    route: L4Kind
    backends: tuple[WeightedPool, ...] = ()
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    ref_issues: list[tuple[RefIssue, str]] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)

    @property
    def name(self) -> str:
        ns, name = self.route.key
        return f"{self.route.KIND.lower()}/{ns}/{name}"


def compile_l4(route: L4Kind, resolve: Resolve) -> CompiledL4:
    out = CompiledL4(route=route)
    rules = route.spec.rules
    if not rules:
        out.issues.append(Issue(Reason.UNSUPPORTED_VALUE,
                                "route has no rules; nothing is forwarded",
                                "spec.rules"))
        return out
    shares: dict[str | None, int] = {}
    for i, rule in enumerate(rules):
        # No matches in these kinds: every rule's backendRefs join one weighted set.
        found = weighted_shares(rule.backend_refs, resolve=resolve, where=f"spec.rules[{i}]",
                                pools=out.pools, ref_issues=out.ref_issues)
        for pool, weight in found.items():
            shares[pool] = shares.get(pool, 0) + weight
    if not shares:
        shares[None] = 1  # nothing usable: every connection is refused
    out.backends = tuple(WeightedPool(pool=p, weight=w) for p, w in shares.items())
    return out
