"""Service ``type: LoadBalancer`` → one L4 listener per port, on the Service's VIP."""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import L4Route, Listener, Protocol, WeightedPool
from podway.model import Service
from podway.translate.backends import PoolSpec, l4_pool, mode_problem
from podway.translate.options import TranslateOptions
from podway.translate.problems import Problem, Reason


def is_ours(service: Service, opts: TranslateOptions) -> bool:
    cls = service.spec.load_balancer_class
    return service.spec.type == "LoadBalancer" and cls in (None, opts.load_balancer_class)


def vip(service: Service, opts: TranslateOptions) -> str:
    """status.loadBalancer.ingress[0].ip, else spec.loadBalancerIP, else the bind address."""
    ingress = service.status.load_balancer.ingress
    if ingress and ingress[0].ip:
        return ingress[0].ip
    return service.spec.load_balancer_ip or opts.address


@dataclass(slots=True)
class ServiceTranslation:
    opts: TranslateOptions
    listeners: list[Listener] = field(default_factory=list)
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def add(self, service: Service) -> None:
        ns, name = service.key
        address = vip(service, self.opts)
        for i, port in enumerate(service.spec.ports):
            if port.protocol not in ("TCP", "UDP"):
                self.problems.append(Problem(
                    ref=service.ref, reason=Reason.UNSUPPORTED_PROTOCOL,
                    message=f"port {port.port}/{port.protocol} is not served (TCP and UDP only)",
                    field=f"spec.ports[{i}].protocol"))
                continue
            unusable = mode_problem(service, port, self.opts)
            if unusable is not None:
                self.problems.append(Problem(ref=service.ref, reason=Reason.BACKEND_NOT_FOUND,
                                             message=unusable, field=f"spec.ports[{i}].nodePort"))
            spec = l4_pool(service, port)
            self.pools.setdefault(spec.name, spec)
            proto = Protocol.UDP if port.protocol == "UDP" else Protocol.TCP
            lname = f"service/{ns}/{name}/{port.port}/{port.protocol.lower()}"
            self.listeners.append(Listener(
                name=lname, address=address, port=port.port, protocol=proto,
                l4_routes=(L4Route(name=lname, backends=(WeightedPool(pool=spec.name),),
                                   origin=service.ref),),
                origins=(service.ref,)))
