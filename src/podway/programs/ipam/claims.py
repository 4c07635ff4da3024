"""What each object asks of the IPAM, read from the snapshot: a ``Claim`` per LoadBalancer
Service and Gateway that is Podway's, and one for the shared Ingress listeners when an Ingress
is (``INGRESS_LISTENERS``: every Ingress is served by the same listeners, so they share a VIP).

Read here and nowhere else:

- explicit requests: annotation ``podway.io/vip`` (one address or a comma-separated list), else
  ``spec.loadBalancerIP`` (Services), or every ``IPAddress`` in ``spec.addresses`` (Gateways);
- what the object holds: ``status.loadBalancer.ingress[].ip`` (Services) and
  ``status.addresses`` (Gateways) — the leader wrote them, so they are how allocations survive
  restarts;
- the pool (``podway.io/vip-pool``), the engine group (``K8sObject.engine_group``: the
  ``podway.io/engine-group`` annotation, or a Gateway's ``spec.infrastructure`` label) and the
  sharing key (``podway.io/allow-shared-vip``) annotations, and the ports the object serves.

Ownership follows the translator's own rules (``spec.loadBalancerClass``, the GatewayClass
controller), so the IPAM never gives an address to an object Podway does not serve.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from podway.model import Ingress, ObjectRef, Service
from podway.model.base import K8sObject
from podway.model.core import Namespace
from podway.model.gateway import Gateway, GatewayClass
from podway.model.snapshot import Snapshot
from podway.translate import annotations as ann
from podway.translate import service as service_rules
from podway.translate.core.options import TranslateOptions
from podway.translate.core.vips import INGRESS_LISTENERS
from podway.translate.gateway.parameters import gateway_engine_group
from podway.translate.ingress import listeners as ingress_rules

# MetalLB's Service annotations, read when Podway's own are absent, so a Service written for
# MetalLB gets the same address from the same pools (docs/vips.md#coming-from-metallb).
METALLB_POOL = ("metallb.io/address-pool", "metallb.universe.tf/address-pool")
METALLB_IPS = ("metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs")
METALLB_SHARE = ("metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip")

PortKey = tuple[str, int]  # (protocol, port): what two sharers of one VIP must not both use


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    ref: ObjectRef
    created: float  # creationTimestamp (seconds); unknown sorts last
    uid: str
    requested: tuple[str, ...] = ()  # explicit addresses, in the object's order
    requested_field: str = ""
    held: tuple[str, ...] = ()  # addresses its status shows (the allocation it had)
    pool: str | None = None
    engine_group: str | None = None
    share: str | None = None
    ports: frozenset[PortKey] = frozenset()
    invalid: str | None = None  # a request that is not an address: the object stays pending
    families: tuple[int, ...] = ()  # IP versions to allocate automatically, in order; (): any one
    all_families: bool = False  # every family in ``families`` is required (RequireDualStack)
    labels: Mapping[str, str] = field(default_factory=dict)  # the object's (pool scopes)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)  # its namespace's

    @property
    def order(self) -> tuple[float, str, ObjectRef]:
        """Who wins a conflict: the oldest, then the lowest uid (then the name, for objects
        read from files, which have neither)."""
        return (self.created, self.uid, self.ref)


HeldSource = Callable[[ObjectRef], "tuple[str, ...] | None"]


def claims_of(snapshot: Snapshot, opts: TranslateOptions,
              held: HeldSource | None = None) -> list[Claim]:
    """Every claim of the snapshot. ``held`` says what an object holds when the snapshot's
    objects carry no status (the controller strips it; it keeps the API's status aside);
    None from it, or no ``held``: the object's own status."""
    claims = [_service_claim(s) for s in snapshot.kind(Service).values()
              if service_rules.is_ours(s, opts) is True]
    ours = {name for (_, name), cls in snapshot.kind(GatewayClass).items()
            if cls.spec.controller_name == opts.gateway_controller}
    claims += [_gateway_claim(g, snapshot) for g in snapshot.kind(Gateway).values()
               if g.spec.gateway_class_name in ours]
    ingresses = sorted((i for i in snapshot.kind(Ingress).values()
                        if ingress_rules.is_ours(i, snapshot, opts) is True), key=Ingress.age_key)
    if ingresses:
        claims.append(_ingress_claim(ingresses, opts, held))
    labels = {name: ns.metadata.labels for (_, name), ns in snapshot.kind(Namespace).items()}
    claims = [replace(c, namespace_labels=labels.get(c.ref.namespace, {})) for c in claims]
    if held is None:
        return claims
    out = []
    for claim in claims:
        found = held(claim.ref) if claim.ref != INGRESS_LISTENERS else None
        out.append(claim if found is None else replace(claim, held=found))
    return out


def _ingress_claim(ingresses: list[Ingress], opts: TranslateOptions,
                   held: HeldSource | None) -> Claim:
    """One claim for the shared Ingress listeners (``INGRESS_LISTENERS``): as old as the oldest
    Ingress that is ours, holding what their ``status.loadBalancer`` shows (the first Ingress
    whose status shows an address; every one shows the same), on the HTTP and HTTPS ports."""
    oldest = ingresses[0]
    found: tuple[str, ...] = ()
    if held is not None:
        for ingress in ingresses:
            found = held(ingress.ref) or ()
            if found:
                break
    ts = oldest.metadata.creation_timestamp
    return Claim(ref=INGRESS_LISTENERS, created=ts.timestamp() if ts is not None else float("inf"),
                 uid=oldest.metadata.uid, held=found[:1],
                 ports=frozenset({("TCP", opts.http_port), ("TCP", opts.https_port)}))


def held_in_status(kind: str, status: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """The addresses a raw API ``status`` shows for a Service or Gateway (None: no status)."""
    if not isinstance(status, Mapping):
        return None
    if kind in ("Service", "Ingress"):
        lb = status.get("loadBalancer")
        entries = lb.get("ingress") if isinstance(lb, Mapping) else None
        key = "ip"
    else:
        entries, key = status.get("addresses"), "value"
    if not isinstance(entries, list):
        return ()
    return tuple(e[key] for e in entries if isinstance(e, Mapping) and isinstance(e.get(key), str)
                 and e.get("type", "IPAddress") == "IPAddress" and e[key])


def _claim(obj: K8sObject, *, requested: tuple[str, ...], where: str, invalid: str | None,
           held: tuple[str, ...], ports: frozenset[PortKey], families: tuple[int, ...] = (),
           all_families: bool = False) -> Claim:
    meta = obj.metadata
    ts = meta.creation_timestamp
    notes = meta.annotations
    return Claim(ref=obj.ref, created=ts.timestamp() if ts is not None else float("inf"),
                 uid=meta.uid, requested=requested, requested_field=where, held=held,
                 pool=_first(notes, ann.VIP_POOL.name, *METALLB_POOL),
                 engine_group=obj.engine_group(),
                 share=_first(notes, ann.ALLOW_SHARED_VIP.name, *METALLB_SHARE), ports=ports,
                 invalid=invalid,
                 families=families, all_families=all_families, labels=meta.labels)


def _addresses(text: str) -> tuple[tuple[str, ...], str | None]:
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    for p in parts:
        try:
            ipaddress.ip_address(p)
        except ValueError:
            return (), f"{p!r} is not an IP address"
    return parts, None


def _first(notes: Mapping[str, str], *keys: str) -> str | None:
    """The first of ``keys`` the annotations set (non-empty)."""
    return next((notes[k] for k in keys if notes.get(k)), None)


def _service_claim(service: Service) -> Claim:
    requested: tuple[str, ...] = ()
    where, invalid = "", None
    notes = service.metadata.annotations
    key = next((k for k in (ann.VIP.name, *METALLB_IPS) if notes.get(k)), None)
    if key is not None:
        requested, invalid = _addresses(notes[key])
        where = f"metadata.annotations[{key}]"
    elif service.spec.load_balancer_ip:
        requested, invalid = _addresses(service.spec.load_balancer_ip)
        where = "spec.loadBalancerIP"
    held = tuple(i.ip for i in service.status.load_balancer.ingress if i.ip)
    ports = frozenset((p.protocol, p.port) for p in service.spec.ports)
    families, required = _families(service)
    return _claim(service, requested=requested, where=where, invalid=invalid, held=held,
                  ports=ports, families=families, all_families=required)


def _families(service: Service) -> tuple[tuple[int, ...], bool]:
    """The VIP families a Service asks for: ``spec.ipFamilies`` (in order) with a dual-stack
    policy gives both (RequireDualStack: both needed); one family or SingleStack gives the
    first; nothing given: any one family."""
    versions = tuple(dict.fromkeys(
        int(f[-1]) for f in service.spec.ip_families if f in ("IPv4", "IPv6")))
    policy = service.spec.ip_family_policy
    if policy in ("PreferDualStack", "RequireDualStack"):
        both = versions + tuple(v for v in (4, 6) if v not in versions)
        return both, policy == "RequireDualStack"
    return versions[:1], False


def _gateway_claim(gateway: Gateway, snapshot: Snapshot) -> Claim:
    requested: tuple[str, ...] = ()
    where, invalid = "", None
    note = gateway.metadata.annotations.get(ann.VIP.name)
    if note:
        requested, invalid = _addresses(note)
        where = ann.VIP.field
    else:
        values = [a.value for a in gateway.spec.addresses if a.type == "IPAddress" and a.value]
        if values:
            requested, invalid = _addresses(",".join(values))
            where = "spec.addresses"
    held = tuple(a.value for a in gateway.status.addresses
                 if a.type == "IPAddress" and a.value)
    ports = frozenset(("UDP" if ls.protocol == "UDP" else "TCP", ls.port)
                      for ls in gateway.spec.listeners)
    claim = _claim(gateway, requested=requested, where=where, invalid=invalid, held=held,
                   ports=ports)
    if claim.engine_group is None:  # the group its class's parameters name draws the pools
        group = gateway_engine_group(gateway.spec.gateway_class_name, snapshot)
        if group is not None:
            claim = replace(claim, engine_group=group)
    return claim
