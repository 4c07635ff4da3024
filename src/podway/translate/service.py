"""Service ``type: LoadBalancer`` → one L4 listener per port, on the Service's VIP.

The VIP is ``status.loadBalancer.ingress[0].ip``, else ``spec.loadBalancerIP``; it is bound only
when the options let manifests choose addresses (``podway.translate.core.addresses``). With an
address allocator (``TranslateOptions.vips``) the Service binds every address it was granted
instead, one listener per address and port, and a pending Service binds nothing. Settings that
restrict who may connect and that Podway does not serve yet (``loadBalancerSourceRanges``, or
the older ``service.beta.kubernetes.io/load-balancer-source-ranges`` annotation) fail closed:
the Service is not served, with an error naming the field, never served to every client.
``sessionAffinity: ClientIP`` is served: the pool hashes on the client's address
(``podway.translate.traffic``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import L4Route, Listener, ListenerProtocol, WeightedPool
from podway.model import Service
from podway.model.snapshot import NO_MODES, Snapshot
from podway.translate.core.addresses import AddressChoice, choose_address
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Problem, Reason, Severity, quote
from podway.translate.core.vips import VipGrant, grant_of
from podway.translate.pools.backends import PoolSpec, l4_pool, mode_problem


def is_ours(service: Service, opts: TranslateOptions) -> bool | Problem:
    """A LoadBalancer Service of our class (or none) is ours; one of another class is
    ``NotOwned`` (``Severity.INFO``); other types are backends only, not listed."""
    if service.spec.type != "LoadBalancer":
        return False
    cls = service.spec.load_balancer_class
    if cls in (None, opts.load_balancer_class):
        return True
    return Problem(ref=service.ref, reason=Reason.NOT_OWNED, severity=Severity.INFO,
                   field="spec.loadBalancerClass",
                   message=f"not served by Podway: loadBalancerClass {quote(cls)} is not "
                           f"{opts.load_balancer_class}")


def vip(service: Service, opts: TranslateOptions) -> tuple[AddressChoice, str]:
    """The address to bind and the field it came from."""
    ingress = service.status.load_balancer.ingress
    if ingress and ingress[0].ip:
        where = "status.loadBalancer.ingress[0].ip"
        return choose_address(ingress[0].ip, opts, where), where
    where = "spec.loadBalancerIP"
    return choose_address(service.spec.load_balancer_ip, opts, where), where


def granted(service: Service, grant: VipGrant) -> tuple[tuple[str, ...], Problem | None]:
    """The allocator's addresses for ``service`` and the problem to report (pending, or a
    request it could not honour)."""
    problem = None
    if grant.reason is not None:
        problem = Problem(ref=service.ref, reason=grant.reason, message=grant.message,
                          field=grant.field or "status.loadBalancer",
                          severity=Severity.ERROR if grant.pending else Severity.WARNING)
    return grant.addresses, problem


SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"


@dataclass(slots=True)
class ServiceTranslation:
    opts: TranslateOptions
    snapshot: Snapshot | None = None  # needed only with an address allocator
    listeners: list[Listener] = field(default_factory=list)
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def add(self, service: Service) -> None:
        ns, name = service.key
        if self._refused(service):
            return
        grant = (grant_of(service.ref, self.snapshot, self.opts)
                 if self.snapshot is not None else None)
        if grant is not None:
            addresses, problem = granted(service, grant)
            if problem is not None:
                self.problems.append(problem)
        else:
            choice, where = vip(service, self.opts)
            if choice.refusal is not None:
                self.problems.append(Problem(
                    ref=service.ref, reason=choice.refusal.reason,
                    message=choice.refusal.message, field=where,
                    severity=Severity.ERROR if choice.address is None else Severity.WARNING))
            addresses = (choice.address,) if choice.address is not None else ()
        if not addresses:
            return
        for i, port in enumerate(service.spec.ports):
            if port.protocol not in ("TCP", "UDP"):
                self.problems.append(Problem(
                    ref=service.ref, reason=Reason.UNSUPPORTED_PROTOCOL,
                    message=f"port {port.port}/{port.protocol} is not served (TCP and UDP only)",
                    field=f"spec.ports[{i}].protocol"))
                continue
            unusable = mode_problem(service, port, self.opts, self.snapshot.backend_modes
                                    if self.snapshot is not None else NO_MODES)
            if unusable is not None:
                self.problems.append(Problem(ref=service.ref, reason=Reason.BACKEND_NOT_FOUND,
                                             message=unusable, field=f"spec.ports[{i}].nodePort"))
            spec = l4_pool(service, port)
            self.pools.setdefault(spec.name, spec)
            proto = ListenerProtocol.UDP if port.protocol == "UDP" else ListenerProtocol.TCP
            for n, address in enumerate(addresses):
                # The first address keeps the historical name; further ones (a second family,
                # several requested VIPs) are told apart by their address.
                lname = f"service/{ns}/{name}/{port.port}/{port.protocol.lower()}"
                if n:
                    lname = f"{lname}/{address}"
                self.listeners.append(Listener(
                    name=lname, address=address, port=port.port, protocol=proto,
                    l4_routes=(L4Route(name=lname, backends=(WeightedPool(pool=spec.name),),
                                       origin=service.ref),),
                    origins=(service.ref,)))

    def _refused(self, service: Service) -> bool:
        """A source-range restriction Podway does not enforce yet: the Service is not served
        (an error), never served to every client (fail closed)."""
        ranges = service.spec.load_balancer_source_ranges
        legacy = service.metadata.annotations.get(SOURCE_RANGES_ANNOTATION, "").strip()
        if not ranges and not legacy:
            return False
        where = ("spec.loadBalancerSourceRanges" if ranges
                 else f"metadata.annotations[{SOURCE_RANGES_ANNOTATION}]")
        self.problems.append(Problem(
            ref=service.ref, reason=Reason.UNSUPPORTED_FIELD, field=where,
            message="client source ranges are not enforced yet, so the Service is not served "
                    "(never open to every client) until they are removed"))
        return True
