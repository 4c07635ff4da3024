"""Pool members, resolved per backend mode from the endpoint kinds of a snapshot.

Each mode is a ``MemberResolver``: it says which kinds move its members and which Services a
change of one such object touches, so the incremental translator re-resolves only those pools.
Pure; resolvers read the snapshot and the ``EndpointIndex`` only. An address or annotation the
engine could not take is left out and reported as a problem on the object that holds it
(EndpointSlice, Node or Pod), with the pool's members: the rest of the pool keeps serving.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from podway.ir import Member, MemberState
from podway.model import EndpointSlice, Node, ObjectRef, Pod, Service, Snapshot, npl
from podway.model.core import Endpoint
from podway.model.snapshot import Key
from podway.translate.core.addresses import address_problem
from podway.translate.core.options import BackendMode, NplTrust, TranslateOptions
from podway.translate.core.problems import Problem, Reason
from podway.translate.pools.backends import PoolSpec, ServiceKey, service_mode


class EndpointIndex:
    """EndpointSlices grouped by Service, and the Services each Pod backs (via targetRef),
    kept up to date one slice at a time."""

    __slots__ = ("_by_service", "_pod_services", "_service_of")

    def __init__(self, slices: Iterable[EndpointSlice] = ()) -> None:
        self._by_service: dict[ServiceKey, dict[Key, EndpointSlice]] = {}
        self._service_of: dict[Key, ServiceKey] = {}
        # pod → service → number of slice endpoints naming the pod (counts survive overlaps)
        self._pod_services: dict[Key, dict[ServiceKey, int]] = {}
        for item in slices:
            self.put(item.key, item)

    def put(self, key: Key, item: EndpointSlice | None) -> ServiceKey | None:
        """Insert, replace or (``None``) delete one slice; returns the Service it belonged to."""
        old_service = self._service_of.pop(key, None)
        if old_service is not None:
            old = self._by_service[old_service].pop(key, None)
            if old is not None:
                self._count_pods(old, old_service, -1)
        if item is None or item.service_name is None:
            return old_service
        service = (item.metadata.namespace, item.service_name)
        self._by_service.setdefault(service, {})[key] = item
        self._service_of[key] = service
        self._count_pods(item, service, +1)
        return old_service

    def _count_pods(self, item: EndpointSlice, service: ServiceKey, delta: int) -> None:
        for endpoint in item.endpoints:
            ref = endpoint.target_ref
            if ref is None or not ref.name or (ref.kind or "Pod") != "Pod":
                continue
            pod = (ref.namespace or item.metadata.namespace, ref.name)
            counts = self._pod_services.setdefault(pod, {})
            counts[service] = counts.get(service, 0) + delta
            if counts[service] <= 0:
                del counts[service]
                if not counts:
                    del self._pod_services[pod]

    def slices(self, service: ServiceKey) -> Mapping[Key, EndpointSlice]:
        return self._by_service.get(service, {})

    def services_of_pod(self, pod: Key) -> Iterable[ServiceKey]:
        return self._pod_services.get(pod, {}).keys()


@dataclass(frozen=True, slots=True)
class MemberContext:
    snapshot: Snapshot
    endpoints: EndpointIndex


@dataclass(frozen=True, slots=True)
class PoolMembers:
    """The members of one pool, and what was left out of it and why."""

    members: tuple[Member, ...] = ()
    problems: tuple[Problem, ...] = ()


@dataclass(slots=True)
class _Found:
    problems: dict[Problem, None] = field(default_factory=dict)  # ordered, deduplicated

    def bad(self, ref: ObjectRef, reason: Reason, message: str, where: str) -> None:
        self.problems[Problem(ref=ref, reason=reason, message=message, field=where)] = None

    def result(self, members: tuple[Member, ...]) -> PoolMembers:
        return PoolMembers(members, tuple(self.problems))


class MemberResolver(typing.Protocol):
    """Resolves the members of one pool. Pure."""

    @property
    def kinds(self) -> frozenset[str]:
        """Kinds whose changes move members (and nothing else)."""
        ...

    def members(self, spec: PoolSpec, ctx: MemberContext) -> PoolMembers: ...

    def affected(self, kind: str, key: Key, ctx: MemberContext) -> Iterable[ServiceKey] | None:
        """Services whose pools a change of ``kind``/``key`` touches; None means every pool.

        EndpointSlice changes are mapped by the translator itself (old and new Service label).
        """
        ...


def endpoint_state(endpoint: Endpoint) -> MemberState:
    if endpoint.conditions.terminating:
        return MemberState.DRAINING
    if endpoint.conditions.ready is False:
        return MemberState.NOT_READY
    return MemberState.READY  # Kubernetes: an unset ready condition means ready


_RANK = {MemberState.READY: 0, MemberState.DRAINING: 1, MemberState.NOT_READY: 2}


@dataclass(frozen=True, slots=True)
class _Backend:
    """One endpoint address with the slice port serving the pool's Service port."""

    address: str
    port: int
    endpoint: Endpoint
    origin: ObjectRef | None


def _backends(spec: PoolSpec, index: EndpointIndex, found: _Found) -> Iterable[_Backend]:
    """Each endpoint address with its port; addresses that are not IPs of the slice's
    addressType are reported on the slice and skipped."""
    want_name = spec.port.name or ""
    for item in index.slices(spec.service).values():
        if item.address_type == "FQDN":
            continue
        port = next((p.port for p in item.ports if (p.name or "") == want_name
                     and p.protocol == spec.port.protocol and p.port is not None), None)
        if port is None:
            continue
        for i, endpoint in enumerate(item.endpoints):
            target = endpoint.target_ref
            origin = (ObjectRef(target.kind or "Pod", target.namespace or spec.service[0],
                                target.name) if target is not None and target.name else None)
            for j, address in enumerate(endpoint.addresses):
                wrong = address_problem(address, item.address_type)
                if wrong is not None:
                    found.bad(item.ref, Reason.INVALID_ADDRESS,
                              f"endpoint address {wrong}; it is left out",
                              f"endpoints[{i}].addresses[{j}]")
                    continue
                yield _Backend(address, port, endpoint, origin)


def serving_while_terminating(endpoint: Endpoint) -> bool:
    """Terminating but still serving (the ``serving`` condition is unset or true)."""
    return bool(endpoint.conditions.terminating) and endpoint.conditions.serving is not False


def _collapse(candidates: Iterable[tuple[Member, bool]]) -> tuple[Member, ...]:
    """One member per address:port, sorted; each candidate says whether it is serving while
    terminating.

    Duplicates happen mid-move: the most useful state wins, then the smallest origin and node,
    so the result never depends on the order of slices. When no member is ready, members still
    serving while terminating take traffic, as kube-proxy does (ProxyTerminatingEndpoints): a
    scale to zero or a node drain finishes requests instead of answering 503 at once. When some
    member is ready, they stay DRAINING but marked ``serving``: the engine's fallback until a
    ready member passed its checks there (a rollout: Kubernetes calls the new pods ready before
    the engine has checked them once, and the old ones must carry the traffic until it has).
    """
    found: dict[tuple[str, int], tuple[Member, bool]] = {}
    for member, serving in candidates:
        key = (member.address, member.port)
        previous = found.get(key)
        if previous is None or _preference(member) < _preference(previous[0]):
            found[key] = (member, serving)
    if not any(m.state is MemberState.READY for m, _ in found.values()):
        found = {k: (replace(m, state=MemberState.READY) if serving else m, serving)
                 for k, (m, serving) in found.items()}
    else:
        found = {k: (replace(m, serving=True) if serving and m.state is MemberState.DRAINING
                     else m, serving) for k, (m, serving) in found.items()}
    return tuple(found[k][0] for k in sorted(found))


def _preference(member: Member) -> tuple[int, str, str]:
    return (_RANK[member.state], str(member.origin or ""), member.node or "")


class ClusterIPResolver:
    """``clusterip`` mode: members are PodIP:port straight from the Service's EndpointSlices."""

    kinds = frozenset({EndpointSlice.KIND})

    def members(self, spec: PoolSpec, ctx: MemberContext) -> PoolMembers:
        found = _Found()
        return found.result(_collapse(
            (Member(address=b.address, port=b.port, state=endpoint_state(b.endpoint),
                    origin=b.origin, node=b.endpoint.node_name, zone=b.endpoint.zone),
             serving_while_terminating(b.endpoint))
            for b in _backends(spec, ctx.endpoints, found)))

    def affected(self, kind: str, key: Key, ctx: MemberContext) -> Iterable[ServiceKey] | None:
        return ()


class NodePortResolver:
    """``nodeport`` mode: every node's address at the Service port's nodePort.

    The address is the node's InternalIP (else ExternalIP), the one a load balancer inside the
    cluster's network reaches and the one Antrea publishes for NodePortLocal.

    The extra-hop baseline of the seeds: any node forwards to a pod, maybe on another node.
    A node whose Ready condition is not True is not ready. With
    ``externalTrafficPolicy: Local`` a node without a ready local endpoint drops the traffic,
    so it is marked not ready too (the imbalance the seeds describe follows from that).
    """

    kinds = frozenset({EndpointSlice.KIND, Node.KIND})

    def members(self, spec: PoolSpec, ctx: MemberContext) -> PoolMembers:
        found = _Found()
        node_port = spec.port.node_port
        if not node_port:
            return PoolMembers()
        local_only = spec.external_traffic_policy == "Local"
        ready_nodes = {b.endpoint.node_name for b in _backends(spec, ctx.endpoints, found)
                       if endpoint_state(b.endpoint) is MemberState.READY}
        out = []
        for node in ctx.snapshot.kind(Node).values():
            address = node.address("InternalIP", "ExternalIP")
            if address is None:
                continue
            wrong = address_problem(address)
            if wrong is not None:
                found.bad(node.ref, Reason.INVALID_ADDRESS,
                          f"node address {wrong}; the node is left out of nodeport pools",
                          "status.addresses")
                continue
            ready = node.ready and (not local_only or node.metadata.name in ready_nodes)
            out.append((Member(address=address, port=node_port, origin=node.ref,
                               node=node.metadata.name,
                               state=MemberState.READY if ready else MemberState.NOT_READY),
                        False))
        return found.result(_collapse(out))

    def affected(self, kind: str, key: Key, ctx: MemberContext) -> Iterable[ServiceKey] | None:
        return None if kind == Node.KIND else ()


class NodePortLocalResolver:
    """``nodeportlocal`` mode: each endpoint's pod, at the NodeIP:port its node's agent
    (Podway's or Antrea's) published in the pod's ``nodeportlocal.antrea.io`` annotation.

    EndpointSlices say which pods back the Service and in what state; the annotation entry for
    the slice port (the pod's target port) and protocol gives the address. A pod without an
    entry yet is left out until its agent writes one.
    """

    kinds = frozenset({EndpointSlice.KIND, Pod.KIND})

    def __init__(self, opts: TranslateOptions | None = None) -> None:
        self._opts = opts or TranslateOptions()

    def members(self, spec: PoolSpec, ctx: MemberContext) -> PoolMembers:
        found = _Found()
        protocol = spec.port.protocol.lower()
        out = []
        for b in _backends(spec, ctx.endpoints, found):
            if b.origin is None or b.origin.kind != "Pod":
                continue
            pod = ctx.snapshot.get(Pod, b.origin.namespace, b.origin.name)
            if pod is None:
                continue
            where = f"metadata.annotations[{npl.ANNOTATION}]"
            entries, error = npl.decode(pod.metadata.annotations.get(npl.ANNOTATION))
            if error is not None:
                found.bad(pod.ref, Reason.INVALID_ANNOTATION, f"{error}; the valid entries "
                          "before it are used", where)
            entry = next((e for e in sorted(entries)
                          if e.pod_port == b.port and e.protocol == protocol), None)
            if entry is None:
                continue
            wrong = address_problem(entry.node_ip)
            if wrong is not None:
                found.bad(pod.ref, Reason.INVALID_ADDRESS,
                          f"nodeIP {wrong}; the pod is left out of its pools", where)
                continue
            untrusted = npl_untrusted(pod, entry, self._opts)
            if untrusted is not None:
                found.bad(pod.ref, Reason.UNTRUSTED_MAPPING,
                          f"{untrusted}; the pod is left out of its pools until its node's "
                          "agent writes the mapping again", where)
                continue
            out.append((Member(address=entry.node_ip, port=entry.node_port,
                               state=endpoint_state(b.endpoint), origin=b.origin,
                               node=b.endpoint.node_name or pod.spec.node_name,
                               zone=b.endpoint.zone),
                        serving_while_terminating(b.endpoint)))
        return found.result(_collapse(out))

    def affected(self, kind: str, key: Key, ctx: MemberContext) -> Iterable[ServiceKey] | None:
        return ctx.endpoints.services_of_pod(key) if kind == Pod.KIND else ()


def npl_untrusted(pod: Pod, entry: npl.NplEntry, opts: TranslateOptions) -> str | None:
    """Why a pod's NodePortLocal mapping is not believed (None: it is). Whoever may patch
    the pod may have written it (issue 23.9), so beyond ``NplTrust.FILES`` it must point at
    the pod's own node (``status.hostIP``) inside the agents' port range, and with
    ``NplTrust.SIGNED`` carry the signature of the whole annotation on this pod made with the key
    of the pod's own node (``npl.node_key``): another node's agent cannot vouch for it."""
    trust = opts.npl_trust
    if trust is NplTrust.FILES:
        return None
    if pod.status.host_ip is None:
        return "the pod has no status.hostIP yet: its mapping cannot be checked"
    if entry.node_ip != pod.status.host_ip:
        return (f"nodeIP {entry.node_ip} is not the pod's node ({pod.status.host_ip}): not a "
                "mapping its node's agent made")
    low, high = opts.npl_port_range
    if not low <= entry.node_port <= high:
        return (f"nodePort {entry.node_port} is outside the agents' range {low}-{high}: not a "
                "mapping an agent made")
    if trust is NplTrust.SIGNED:
        annotations = pod.metadata.annotations
        node = pod.spec.node_name
        if opts.npl_key is None or not node or not npl.vouched(
                npl.node_key(opts.npl_key, node), uid=pod.metadata.uid,
                value=annotations.get(npl.ANNOTATION),
                signed=annotations.get(npl.SIGNATURE_ANNOTATION)):
            return (f"the annotation is not signed by the agent of the pod's node "
                    f"({npl.SIGNATURE_ANNOTATION} missing or not matching): it was written or "
                    "changed by someone else")
    return None


class ModeResolver:
    """Each pool resolved in its Service's mode (``PoolSpec.mode``, else ``opts.mode``).

    Its kinds are every mode's, so a Pod or Node change re-resolves only the pools it can move
    (a Node change: the pools in ``nodeport`` mode). A mode change is a Service change, which is
    structural: the pool spec changes with it and its members are resolved again.
    """

    kinds = frozenset({EndpointSlice.KIND, Node.KIND, Pod.KIND})

    def __init__(self, opts: TranslateOptions) -> None:
        self._opts = opts
        self._default = opts.mode
        self._by_mode: dict[BackendMode, MemberResolver] = {
            BackendMode.CLUSTERIP: ClusterIPResolver(), BackendMode.NODEPORT: NodePortResolver(),
            BackendMode.NODEPORTLOCAL: NodePortLocalResolver(opts)}

    def members(self, spec: PoolSpec, ctx: MemberContext) -> PoolMembers:
        return self._by_mode[spec.mode or self._default].members(spec, ctx)

    def affected(self, kind: str, key: Key, ctx: MemberContext) -> Iterable[ServiceKey] | None:
        if kind == Node.KIND:
            return [key for key, service in ctx.snapshot.kind(Service).items()
                    if service_mode(service, self._opts, ctx.snapshot.backend_modes)
                    is BackendMode.NODEPORT]
        return ctx.endpoints.services_of_pod(key) if kind == Pod.KIND else ()


def resolver_for(opts: TranslateOptions) -> MemberResolver:
    return ModeResolver(opts)
