"""The status each object should carry (pure): from the status document (``podway.status``) of
one pipeline state, Gateway API conditions, listeners with ``attachedRoutes`` and route parents
exactly as the translator computed them (engine refusals included), Service and Ingress
``status.loadBalancer.ingress`` (the VIP the listener binds, else ``--lb-address``) and the VIP
allocation condition. ``Desired`` keeps it from state to state and recomputes only the objects
whose inputs changed; every result equals ``desired`` from scratch.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from podway.base.mapdiff import id_changes
from podway.ir import IR, Listener
from podway.model import Ingress, Service
from podway.model.base import ObjectRef
from podway.model.kinds import CRD_STATUS_KINDS
from podway.model.snapshot import Key
from podway.pipeline import Rejection, State
from podway.programs.controller.status_pools import (
    POOL_KINDS,
    PoolStatuses,
    pool_ipam,
    pool_statuses,
)
from podway.programs.controller.status_times import Status
from podway.status import StatusDocument
from podway.status.diff import KindChanges
from podway.translate import TranslateOptions
from podway.translate import annotations as ann
from podway.translate import service as service_rules
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.core.status import to_api

Target = tuple[str, Key]  # (kind, (namespace, name))


def desired(doc: StatusDocument, state: State, *, opts: TranslateOptions,
            lb_address: str | None) -> dict[Target, Status]:
    """The status every object Podway writes should carry (no timestamps yet), from scratch."""
    out: dict[Target, Status] = {}
    for ref, entry in doc.objects.items():
        if ref.kind in CRD_STATUS_KINDS and entry.status is not None:
            out[(ref.kind, (ref.namespace, ref.name))] = to_api(entry.status, kind=ref.kind)
    bound = bound_addresses(state.ir)
    named = listener_names(state.ir)
    snapshot = state.update.snapshot
    for key, service in snapshot.kind(Service).items():
        status = _service_status(key, service, bound, doc, opts=opts, lb_address=lb_address,
                                 listeners=named.get(("Service", key), ()))
        if status is not None:
            out[("Service", key)] = status
    for key in snapshot.kind(Ingress):
        status = _ingress_status(key, bound, doc, lb_address)
        if status is not None:
            out[("Ingress", key)] = status
    out.update(pool_statuses(state, opts))
    return out


class Desired:
    """``desired`` kept from one state to the next: only the targets whose inputs changed are
    recomputed — the objects the status document says changed, the Services and Ingresses
    added, replaced or removed (by identity), and those whose bound addresses moved."""

    def __init__(self, *, opts: TranslateOptions, lb_address: str | None) -> None:
        self._opts = opts
        self._lb_address = lb_address
        self._doc: StatusDocument | None = None
        self._want: dict[Target, Status] = {}
        self._kinds = KindChanges(("Service", "Ingress"))
        self._bound = BoundAddresses()
        ipam = pool_ipam(opts)
        self._pools = PoolStatuses(ipam, opts) if ipam is not None else None

    @property
    def want(self) -> Mapping[Target, Status]:
        """Every target's desired status as of the last ``update`` (do not mutate)."""
        return self._want

    def update(self, doc: StatusDocument, state: State) -> set[Target]:
        """Bring ``want`` to ``doc`` and ``state``; the targets whose status may differ."""
        delta = doc.changed_since(self._doc)
        snapshot = state.update.snapshot
        services, ingresses = snapshot.kind(Service), snapshot.kind(Ingress)
        replaced = self._kinds.update(snapshot, generation=state.generation,
                                      changed=state.update.changed)
        moved = self._bound.update(state.ir.listeners)
        pools = self._pools.update(state) if self._pools is not None else set()
        if delta is None:  # another lineage (the first document): from scratch
            before = self._want
            self._want = desired(doc, state, opts=self._opts, lb_address=self._lb_address)
            if self._pools is not None:  # the same statuses, kept as the objects followed
                self._want.update(self._pools.want)
            self._doc = doc
            return set(before) | set(self._want)
        touched: set[Target] = set()
        for ref in delta:
            target = (ref.kind, (ref.namespace, ref.name))
            if ref.kind in POOL_KINDS:
                continue  # followed by ``self._pools``
            if ref.kind in CRD_STATUS_KINDS:
                entry = doc.objects.get(ref)
                if entry is not None and entry.status is not None:
                    self._want[target] = to_api(entry.status, kind=ref.kind)
                elif self._want.pop(target, None) is None:
                    continue
            elif ref.kind not in ("Service", "Ingress"):
                continue  # no status of its own to write
            touched.add(target)
        touched |= replaced
        touched |= moved | self._bound.renamed
        bound = self._bound.bound
        out: set[Target] = set()
        for target in touched:
            kind, key = target
            status: Status | None
            if kind == "Service":
                service = services.get(key)
                status = None if service is None else _service_status(
                    key, service, bound, doc, opts=self._opts,
                    lb_address=self._lb_address,
                    listeners=self._bound.names.get(target, ()))
            elif kind == "Ingress":
                status = _ingress_status(key, bound, doc, self._lb_address) \
                    if key in ingresses else None
            else:
                out.add(target)  # set above
                continue
            if status is None:
                if self._want.pop(target, None) is not None:
                    out.add(target)
            elif status != self._want.get(target):
                self._want[target] = status
                out.add(target)
        self._take_pools(pools)
        self._doc = doc
        return out | pools

    def _take_pools(self, targets: set[Target]) -> None:
        """The pool objects' statuses (``status_pools``), already worked out."""
        want = self._pools.want if self._pools is not None else {}
        for target in targets:
            if target in want:
                self._want[target] = want[target]
            else:
                self._want.pop(target, None)


class BoundAddresses:
    """``bound_addresses`` from one listener tuple to the next: only the targets of the
    listeners added or removed (by identity, an id index at C speed) are worked out again, and
    those that bind several addresses (their order is the listeners' order, which may move):
    one route change — its listener replaced among thousands — costs that listener."""

    def __init__(self) -> None:
        self._listeners: tuple[Listener, ...] = ()
        self._ids: dict[int, Listener] = {}
        self._of: dict[Target, dict[int, Listener]] = {}  # target → its listeners, by id
        self._several: set[Target] = set()  # targets bound to more than one address
        self.bound: dict[Target, list[str]] = {}  # what ``bound_addresses`` gives
        self.names: dict[Target, tuple[tuple[str, str], ...]] = {}  # ``listener_names``
        self.renamed: set[Target] = set()  # targets whose ``names`` the last update changed

    def update(self, listeners: tuple[Listener, ...]) -> set[Target]:
        """Follow ``listeners``; the targets whose bound addresses changed."""
        self.renamed = set()
        if listeners is self._listeners:
            return set()
        ids = dict(zip(map(id, listeners), listeners, strict=True))
        added, removed = id_changes(self._ids, ids)
        touched = set(self._several)
        for i, step in [(i, -1) for i in removed] + [(i, 1) for i in added]:
            listener = (self._ids if step < 0 else ids)[i]
            for origin in listener.origins:
                target = (origin.kind, (origin.namespace, origin.name))
                mine = self._of.setdefault(target, {})
                if step < 0:
                    mine.pop(i, None)
                else:
                    mine[i] = listener
                touched.add(target)
        self._listeners, self._ids = listeners, ids
        position: dict[int, int] | None = None
        moved: set[Target] = set()
        for target in touched:
            mine = self._of[target]
            addresses = list(dict.fromkeys(listener.address for listener in mine.values()))
            if len(addresses) > 1:  # in the order of the listeners (the first one counts)
                if position is None:
                    position = dict(zip(map(id, reversed(listeners)),
                                        range(len(listeners) - 1, -1, -1), strict=True))
                found = position
                addresses = list(dict.fromkeys(
                    mine[i].address for i in sorted(mine, key=lambda i: found[i])))
                self._several.add(target)
            else:
                self._several.discard(target)
            names = tuple(sorted({(ls.name, ls.address) for ls in mine.values()}))
            if not mine:
                del self._of[target]
            if names != self.names.get(target, ()):
                self.renamed.add(target)
                if names:
                    self.names[target] = names
                else:
                    del self.names[target]
            if addresses != self.bound.get(target, []):
                moved.add(target)
                if addresses:
                    self.bound[target] = addresses
                else:
                    del self.bound[target]
        return moved


def bound_addresses(ir: IR) -> dict[Target, list[str]]:
    """Every address each object's listeners bind, in listener order."""
    bound: dict[Target, list[str]] = {}
    for listener in ir.listeners:
        for origin in listener.origins:
            seen = bound.setdefault((origin.kind, (origin.namespace, origin.name)), [])
            if listener.address not in seen:
                seen.append(listener.address)
    return bound


def listener_names(ir: IR) -> dict[Target, tuple[tuple[str, str], ...]]:
    """Each object's listeners as (name, address), sorted."""
    out: dict[Target, set[tuple[str, str]]] = {}
    for listener in ir.listeners:
        for origin in listener.origins:
            out.setdefault((origin.kind, (origin.namespace, origin.name)), set()).add(
                (listener.name, listener.address))
    return {target: tuple(sorted(names)) for target, names in out.items()}


def _service_status(key: Key, service: Service, bound: Mapping[Target, list[str]],
                    doc: StatusDocument, *, opts: TranslateOptions, lb_address: str | None,
                    listeners: Iterable[tuple[str, str]] = ()) -> Status | None:
    if not service_rules.is_ours(service, opts):
        return None
    found = doc.objects.get(ObjectRef("Service", *key))
    refused = {r.resource: r for r in (found.rejections if found is not None else ())
               if r.type_name == "Listener"}
    mine = list(listeners)
    addresses = bound.get(("Service", key), [])
    if opts.vips is None and refused:
        # An address none of whose listeners an engine took serves nothing of this Service:
        # it is not advertised (external-dns would publish a dead address). With --vip-pools
        # the address stays: it is the allocation, which the status carries across restarts.
        live = {address for name, address in mine if name not in refused}
        addresses = [a for a in addresses if a in live]
    # Every VIP the Service binds (an IPAM grant may hold several): the published status
    # is also how the allocation survives a restart (podway.programs.ipam reads it back).
    ips = dict.fromkeys(ip for address in addresses
                        if (ip := _published(address, lb_address)))
    status: Status = {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}}
    conditions = [programmed_condition(mine, refused, found.problems if found else (),
                                       service.metadata.generation)]
    if opts.vips is not None:
        conditions.append(vip_condition(
            list(ips), found.problems if found is not None else (),
            service.metadata.generation))
    status["conditions"] = conditions
    return status


PROGRAMMED_CONDITION = "podway.io/Programmed"


def programmed_condition(listeners: list[tuple[str, str]], refused: Mapping[str, Rejection],
                         problems: Iterable[Problem], generation: int) -> Status:
    """Whether the engines serve the Service: False with the engine's message when one refused
    a listener of it (Envoy refuses a listener it cannot bind: its port taken), False when it
    has no listener (the translator's error says why), True when every listener was taken."""
    def condition(status: str, reason: str, message: str) -> Status:
        return {"type": PROGRAMMED_CONDITION, "status": status, "reason": reason,
                "message": message[:1024], "observedGeneration": generation}

    if refused:
        name = min(refused)
        first = refused[name]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        return condition("False", "EngineRefused", f"engine {first.node} refused listener "
                         f"{name}{more}: {first.message}")
    if not listeners:
        error = next((p for p in problems if p.severity is Severity.ERROR), None)
        return condition("False", "NotServed", error.message if error is not None
                         else "no listener serves this Service")
    return condition("True", "Programmed", f"{len(listeners)} listener(s) configured on "
                     "the engines")


def _ingress_status(key: Key, bound: Mapping[Target, list[str]], doc: StatusDocument,
                    lb_address: str | None) -> Status | None:
    found = doc.objects.get(ObjectRef("Ingress", *key))
    if found is None or not found.owned:
        return None
    addresses = bound.get(("Ingress", key))
    ip = _published(addresses[0] if addresses else None, lb_address) if found.accepted \
        else None
    return {"loadBalancer": {"ingress": [{"ip": ip}] if ip else []}}


VIP_CONDITION = "podway.io/VIPAllocated"
# Problems of the VIP allocation (podway.programs.ipam): they make the condition False.
VIP_REASONS = frozenset({Reason.POOL_EXHAUSTED, Reason.ADDRESS_IN_USE, Reason.ADDRESS_NOT_IN_POOL,
                         Reason.UNKNOWN_POOL, Reason.ADDRESS_NOT_ASSIGNED})


def vip_condition(ips: list[str], problems: Iterable[Problem], generation: int) -> Status:
    """The Service condition saying whether the IPAM gave it its VIPs (with ``--vip-pools``):
    False with the allocation problem's reason and message while it is pending."""
    pending = next((p for p in problems if p.reason in VIP_REASONS
                    or (p.reason is Reason.INVALID_ADDRESS and p.field in (
                        "spec.loadBalancerIP", ann.VIP.field))), None)
    if pending is not None:
        return {"type": VIP_CONDITION, "status": "False", "reason": str(pending.reason),
                "message": pending.message, "observedGeneration": generation}
    return {"type": VIP_CONDITION, "status": "True", "reason": "Allocated",
            "message": f"VIPs: {', '.join(ips)}" if ips else "allocated",
            "observedGeneration": generation}


def _published(address: str | None, lb_address: str | None) -> str | None:
    """The address to publish: a specific bind address (a VIP), else ``--lb-address``."""
    if address is None:
        return None
    try:
        if not ipaddress.ip_address(address).is_unspecified:
            return address
    except ValueError:
        return None
    return lb_address
