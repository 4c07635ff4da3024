"""The readiness gate's inputs, kept from pipeline state to state: which pods each pool has as
members and at which address (``PodMembers``), the gated Pods (``GatedPods``) and the
terminating ones. Each is read again only for the pools, Pods and EndpointSlices replaced
(``MapDiff``), so a new route or one moved endpoint costs its pools, not every gated pod
(``readiness``).
"""

from collections import Counter
from collections.abc import Collection, Iterable, Mapping

from podway.base.mapdiff import MapDiff
from podway.engines.member_health import HostKey
from podway.ir import Pool
from podway.model.core import LB_READY, EndpointSlice, Pod
from podway.model.snapshot import Key, Snapshot
from podway.status.diff import KindChanges


def pod_members(pools: Mapping[str, Pool]) -> dict[Key, tuple[HostKey, ...]]:
    """Each pod → the (pool, "address:port") it is a member of (left-out zero weights aside:
    the engine never gets them)."""
    out: dict[Key, list[HostKey]] = {}
    for name, pool in pools.items():
        for key, host in _pod_hosts(name, pool):
            out.setdefault(key, []).append(host)
    return {key: tuple(sorted(hosts)) for key, hosts in out.items()}


class PodMembers:
    """``pod_members`` from one state to the next: only the pools replaced (by identity:
    ``MapDiff``) are read again, so a new route or one moved endpoint costs its pools, not
    every pool."""

    def __init__(self) -> None:
        self._diff: MapDiff[str] = MapDiff()
        self._pools: dict[str, Pool] = {}
        self._hosts: dict[Key, Counter[HostKey]] = {}
        self.members: dict[Key, tuple[HostKey, ...]] = {}  # what ``pod_members`` gives
        self.changed: set[Key] = set()  # pods whose members the last ``update`` moved

    def pods_of(self, hosts: Iterable[HostKey]) -> set[Key]:
        """The pods that are these members (from their pools' members: no index kept)."""
        wanted: dict[str, set[str]] = {}
        for pool, address in hosts:
            wanted.setdefault(pool, set()).add(address)
        out: set[Key] = set()
        for name, addresses in wanted.items():
            found = self._pools.get(name)
            if found is not None:
                out.update(key for key, host in _pod_hosts(name, found)
                           if host[1] in addresses)
        return out

    def pods_in(self, pools: Iterable[str]) -> set[Key]:
        """The pods that are members of these pools."""
        return {key for name in pools if (pool := self._pools.get(name)) is not None
                for key, _ in _pod_hosts(name, pool)}

    def update(self, pools: Mapping[str, Pool], *,
               known: tuple[Mapping[str, Pool], Iterable[str]] | None = None
               ) -> Mapping[Key, tuple[HostKey, ...]]:
        """Follow ``pools`` (``known``: the translator's word on the pools replaced, see
        ``MapDiff.update``)."""
        touched: set[Key] = set()
        self.changed = set()
        for name in self._diff.update(pools, known=known):
            for pool, step in ((self._pools.pop(name, None), -1), (pools.get(name), 1)):
                if pool is None:
                    continue
                for key, host in _pod_hosts(name, pool):
                    hosts = self._hosts.setdefault(key, Counter())
                    hosts[host] += step
                    touched.add(key)
                if step > 0:
                    self._pools[name] = pool
        for key in touched:
            hosts = self._hosts[key]
            found = tuple(sorted(hosts.elements()))
            if found != self.members.get(key, ()):
                self.changed.add(key)
            if found:
                self.members[key] = found
            else:
                del self._hosts[key]
                self.members.pop(key, None)
        return self.members


def _pod_hosts(name: str, pool: Pool) -> Iterable[tuple[Key, HostKey]]:
    for member in pool.members:
        origin = member.origin
        if origin is None or origin.kind != "Pod" or member.weight <= 0:
            continue
        yield (origin.namespace, origin.name), (name, f"{member.address}:{member.port}")


class GatedPods:
    """The Pods that list the gate, and the pods with a terminating endpoint, from one state
    to the next: only the Pods and EndpointSlices replaced (``MapDiff``) are read again."""

    def __init__(self) -> None:
        self._kinds = KindChanges((Pod.KIND, EndpointSlice.KIND))
        self._slice_pods: dict[Key, frozenset[Key]] = {}  # slice → its terminating pods
        self._terminating: Counter[Key] = Counter()
        self.gated: dict[Key, Pod] = {}
        # pods the last ``update`` replaced, added or removed (gated or not), or that began or
        # stopped terminating
        self.changed: set[Key] = set()

    def update(self, pods: Mapping[Key, Pod], slices: Mapping[Key, EndpointSlice], *,
               generation: int | None = None,
               changed: Iterable[tuple[str, Key]] | None = None
               ) -> tuple[Mapping[Key, Pod], Collection[Key]]:
        """(gated Pods by key, pods going away): what ``terminating_pods`` and a scan of every
        Pod for ``LB_READY`` give. ``generation`` and ``changed``: the source's change list
        (``KindChanges``), taken when the generation follows the last one seen."""
        moved = self._kinds.update(Snapshot({Pod.KIND: pods, EndpointSlice.KIND: slices}),
                                   generation=generation, changed=changed)
        self.changed = {key for kind, key in moved if kind == Pod.KIND}
        changed_slices = [key for kind, key in moved if kind == EndpointSlice.KIND]
        for key in list(self.changed):
            pod = pods.get(key)
            if pod is not None and pod.gated(LB_READY):
                self.gated[key] = pod
            else:
                self.gated.pop(key, None)
        for key in changed_slices:
            went = self._slice_pods.pop(key, frozenset())
            self._terminating.subtract(went)
            found = slices.get(key)
            now = terminating_pods({key: found}) if found is not None else frozenset()
            if now:
                self._slice_pods[key] = now
                self._terminating.update(now)
            for pod_key in went ^ now:  # counted in or out: it may have begun or stopped
                self.changed.add(pod_key)
                if self._terminating[pod_key] <= 0:
                    del self._terminating[pod_key]
        return self.gated, self._terminating.keys()


def terminating_pods(slices: Mapping[Key, EndpointSlice]) -> frozenset[Key]:
    """Pods with a terminating endpoint in some EndpointSlice: they are going away, their gate
    is not written (a check failing as the pod stops would only cost a write). Read from the
    slices, not the pools: a pool whose members all terminate serves them as ready."""
    return frozenset(
        (ref.namespace or key[0], ref.name)
        for key, found in slices.items() for endpoint in found.endpoints
        if endpoint.conditions.terminating and (ref := endpoint.target_ref) is not None
        and ref.kind == "Pod")
