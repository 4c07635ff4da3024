"""The readiness gate: a Pod that lists ``podway.io/lb-ready`` in ``spec.readinessGates`` is
Ready only once every engine serving it has found it healthy.

Inputs: the pipeline's states (which pools have which pod as a member, at which address; the
gated Pods and their current condition, ``podway.sources.kube_kinds.slim_pod``), the engines
connected over ADS to this replica now (node ids) and each engine's member health report
(``podway.engines.member_health``, sent by ``podway.envoy.engine.health_report`` to every replica).

The engines a pod waits for (``counted_engines``) are what this replica can know: those with a
report stream open to it, wherever their xDS goes (an engine on a follower's xDS that reports
to the leader counts), and those connected to it over ADS (one that does not report blocks
True). An engine that reaches neither this replica's xDS nor its reports is unknown here and
cannot block: with several replicas, the leader cannot wait for an engine that talks only to
a follower (``docs/design/readiness-gate.md``, "Several controller replicas").

Engine groups (``podway.programs.controller.groups``): a counted engine counts for a member (pool,
address) only if it is sent that pool. An engine without a group is sent every pool; one of
group G only the pools of ``subset(ir, G, group_of(snapshot))``. Its group is what this
replica's xDS serves it (``AdsServicer.engine_groups``) or, for an engine that only reports
here, what its report names (``MemberHealthReports.groups``); xDS wins when both are known.
A member that no counted engine is sent leaves the pod unknown (as no engine at all does).

``judge`` (pure) decides per pod:

* **True** (``Healthy``): every counted engine reported every one of the pod's members (each
  pool and port it serves) that it is sent as healthy — in its pool and passing its active
  checks.
* **False** (``Unhealthy``): some engine reports a member failing its active check or ejected by
  outlier detection.
* **unknown** (``WaitingForEngines``, ``NoEngine``, ``NotServed``): an engine has not reported
  (an engine connected over ADS that never reported blocks True), its Envoy does not have the
  member yet, or has not checked it yet; no engine is counted (or none is sent the pod's
  pools, or some of them); or no pool has the pod as a member. An
  unknown verdict never turns True into False — a newly connected engine, or a controller
  restart, must not take serving pods out — but a pod not yet True gets False with the reason,
  so ``kubectl describe pod`` says what it waits for.

An engine stops counting once it has neither stream open to this replica.
A terminating pod (an endpoint of it is terminating) is left alone: it is going away.

``ReadinessGate`` writes the verdicts: a strategic merge patch of the Pod's ``status`` subresource
(``conditions`` merge by ``type``, so the kubelet's conditions stay), only when status, reason
or message differ from what the Pod carries, ``lastTransitionTime`` moving only when the status
flips. It passes on every pipeline state, report change and engine (dis)connection
(coalesced), and every ``resync_s`` (failed writes, leadership gained). A pass costs the change,
not the gated pods (``plan``): what a state tells it — each pod's members, the gated pods, the
terminating ones — is kept from state to state and read again only for the pools, Pods and
EndpointSlices replaced (``PodMembers``, ``GatedPods``), and only the pods whose inputs moved are
judged again: their Pod, members or terminating endpoint; the members an engine's report changed
(``MemberHealthReports.on_change``); the pools an engine group in use is sent; a refused or
dropped write. Every gated pod is judged when the counted engines or their groups change, an
engine's whole view comes or goes, and on a leader's first pass. Tested by property: the writes
equal those of judging every gated pod.
Only a leader writes: ``writes_allowed`` is asked before every pass and again right before
each write (``podway.programs.controller.leader``'s ``is_leader``): a write judged before the Lease
was lost is dropped (``podway_controller_fenced_writes_total{writer="readiness"}``), not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from kubernetes_asyncio import client

from podway.base.mapdiff import MapDiff
from podway.engines.member_health import Health, HostKey, HostState, MemberHealthReports
from podway.ir import Pool
from podway.kube.errors import ApiError, NotFound, api_error
from podway.model.core import LB_READY, EndpointSlice, Pod, PodCondition
from podway.model.snapshot import Key, Snapshot
from podway.pipeline import Pipeline, State
from podway.programs.controller.groups import group_of, subset
from podway.programs.controller.metrics import ControllerMetrics
from podway.status.diff import KindChanges, pool_hint

log = logging.getLogger(__name__)

View = Mapping[HostKey, HostState]
_LISTED = 3  # members or engines named in one message, at most
_RETRY_S = 1.0  # after a failed write
VERDICTS = ("Healthy", "Unhealthy", "WaitingForEngines", "NoEngine", "NotServed", "Terminating")


@dataclass(frozen=True, slots=True)
class Verdict:
    """``status`` None: unknown (see the module docstring)."""

    status: Literal["True", "False"] | None
    reason: str
    message: str


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


def counted_engines(connected: Iterable[str], reporting: Iterable[str]) -> frozenset[str]:
    """The engines a pod waits for here: connected over ADS to this replica (a silent one
    blocks True) or reporting to it (its xDS may go to another replica)."""
    return frozenset(connected) | frozenset(reporting)


Serves = Callable[[str, str], bool]  # (engine, pool) → that engine is sent that pool


def _everything(engine: str, pool: str) -> bool:
    return True


def serving(groups: Mapping[str, str], pools_of: Callable[[str], Collection[str]]) -> Serves:
    """Which engine is sent which pool: an engine without a group (not in ``groups``, or "")
    every pool, one of group G the pools ``pools_of(G)`` names."""
    def serves(engine: str, pool: str) -> bool:
        group = groups.get(engine, "")
        return not group or pool in pools_of(group)
    return serves


def judge(members: tuple[HostKey, ...], engines: Collection[str],
          views: Callable[[str], View | None], serves: Serves = _everything) -> Verdict:
    """The verdict for one pod from its members, the counted engines and their reports; each
    engine is asked only about the members whose pool it is sent (``serves``)."""
    if not members:
        return Verdict(None, "NotServed", "no pool of Podway has this pod as a member")
    if not engines:
        return Verdict(None, "NoEngine",
                       "no engine is connected or reporting to the writing controller")
    asked = {engine: tuple(h for h in members if serves(engine, h[0]))
             for engine in sorted(engines)}
    asked = {engine: hosts for engine, hosts in asked.items() if hosts}
    if not asked:
        return Verdict(None, "NoEngine", "no engine connected or reporting to the writing "
                       "controller is sent this pod's pools (engine groups)")
    failing: list[str] = []
    waiting = [f"no engine connected or reporting here is sent {pool} (engine groups)"
               for pool in sorted({h[0] for h in members} - {
                   h[0] for hosts in asked.values() for h in hosts})]
    for engine, hosts in asked.items():
        view = views(engine)
        if view is None:
            waiting.append(f"engine {engine} has not reported member health")
            continue
        for host in hosts:
            state = view.get(host)
            where = f"{host[0]} {host[1]}"
            if state is None:
                waiting.append(f"engine {engine} does not have {where} yet")
            elif state.health is Health.UNHEALTHY:
                failing.append(f"engine {engine}: {where} {state.reason}".rstrip())
            elif state.health is Health.PENDING:
                waiting.append(f"engine {engine}: {where} {state.reason}".rstrip())
    if failing:
        return Verdict("False", "Unhealthy", _join(failing))
    if waiting:
        return Verdict(None, "WaitingForEngines", _join(waiting))
    where = _join([f"{pool} {address}" for pool, address in members])
    return Verdict("True", "Healthy", f"healthy in {len(asked)} engine(s): {where}")


def _join(items: list[str]) -> str:
    more = len(items) - _LISTED
    return "; ".join(items[:_LISTED]) + (f"; and {more} more" if more > 0 else "")


def condition(current: PodCondition | None, verdict: Verdict, *, now: str
              ) -> dict[str, str] | None:
    """The condition to write, or None when the pod already says it (or an unknown verdict
    meets a True condition, which stays)."""
    status = verdict.status
    if status is None:
        if current is not None and current.status == "True":
            return None
        status = "False"
    if current is not None and (current.status, current.reason or "", current.message or "") \
            == (status, verdict.reason, verdict.message):
        return None
    since = (current.last_transition_time if current is not None
             and current.status == status and current.last_transition_time else now)
    return {"type": LB_READY, "status": status, "reason": verdict.reason,
            "message": verdict.message, "lastTransitionTime": since}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ReadinessGate:
    """Keeps ``podway.io/lb-ready`` of gated Pods true to the engines (module docstring)."""

    def __init__(self, api: client.ApiClient, pipeline: Pipeline,
                 reports: MemberHealthReports, connected: Callable[[], Mapping[str, str]], *,
                 writes_allowed: Callable[[], bool] = lambda: True, resync_s: float = 10.0,
                 concurrency: int = 16, now: Callable[[], str] = _now,
                 metrics: ControllerMetrics | None = None) -> None:
        self._api = api
        self._pipeline = pipeline
        self._reports = reports
        # node ids with an ADS stream to this replica → the engine group each is served
        # ("": every pool)
        self._connected = connected
        self._writes_allowed = writes_allowed
        self._resync_s = resync_s
        self._limit = asyncio.Semaphore(concurrency)
        self._now = now
        self._metrics = metrics or ControllerMetrics()
        self._wake = asyncio.Event()
        self._members = PodMembers()
        self._gated = GatedPods()
        # the (IR, snapshot) the pools of each engine group were found in; group → its pools
        self._group_pools: tuple[object, object, dict[str, frozenset[str]]] = (None, None, {})
        # pod → (the Pod object the write was judged on, what was written): the same write
        # is not sent again until the watch shows the Pod changed.
        self._written: dict[Key, tuple[Pod, dict[str, str]]] = {}
        self.writes = 0  # conditions written (tests, metrics)
        self._failed = False  # a write failed: judge again soon, not only at the resync
        # What the next pass judges again (``plan``): every gated pod, or the pods whose
        # inputs moved since the last pass — these, and the members engines reported on.
        self._everyone = True
        self._again: set[Key] = set()  # pods whose write failed or was dropped
        self._hosts: set[HostKey] = set()  # members some engine's report changed
        self._groups: dict[str, str] = {}  # engine → group, as the last pass saw them
        self._sent: dict[str, frozenset[str]] = {}  # group in use → its pools, last pass
        self._verdicts: dict[Key, str] = {}  # gated pod → the reason of its verdict
        self._tally: Counter[str] = Counter()  # verdict reason → pods
        reports.on_change(self._reported)
        reports.subscribe(self.wake)

    def judge_everyone(self) -> None:
        """The next ``plan`` judges every gated pod."""
        self._everyone = True

    def _reported(self, node: str, hosts: frozenset[HostKey] | None) -> None:
        if hosts is None:
            self.judge_everyone()  # an engine's view came or went: every verdict may move
        else:
            self._hosts |= hosts

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._follow(), name="readiness-states")
            while True:
                wait_s = min(self._resync_s, _RETRY_S) if self._failed else self._resync_s
                # Not ``wait_for``: on 3.11 it can swallow a cancellation that meets a wake-up.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await self._wake.wait()
                self._failed = False
                self._wake.clear()
                state = self._pipeline.state
                if state is not None:
                    await self.judge_all(state)

    async def _follow(self) -> None:
        async for _ in self._pipeline.states():
            self.wake()

    async def judge_all(self, state: State) -> int:
        """Judge the gated pods of ``state`` whose verdict may have moved (``plan``) and write
        what changed; the number written."""
        on_xds = dict(self._connected())
        connected, reporting = frozenset(on_xds), self._reports.nodes
        for via, count in (("both", len(connected & reporting)),
                           ("xds_only", len(connected - reporting)),
                           ("reports_only", len(reporting - connected))):
            self._metrics.engines.labels(via=via).set(count)
        if not self._writes_allowed():
            self._written.clear()  # a follower's memory is stale once it leads
            self.judge_everyone()  # so is what it judged: a new leader judges every pod
            return 0
        todo = self.plan(state, on_xds)
        if todo:
            await asyncio.gather(*(self._patch(*item) for item in todo))
        return len(todo)

    def plan(self, state: State, on_xds: Mapping[str, str]
             ) -> list[tuple[Key, Pod, dict[str, str]]]:
        """The writes due for ``state``: each gated pod whose inputs moved since the last plan
        is judged again — its Pod object, its members, whether it terminates, the members an
        engine's report changed, the pools of an engine group in use; every gated pod when the
        counted engines, their groups or an engine's whole view changed, and on the first
        plan. Any other pod's verdict and condition are what they were (equal to judging
        every pod: tested by property). ``on_xds``: the engines on this replica's xDS → the
        group each is served."""
        members = self._members.update(state.ir.pools, known=pool_hint(state.result))
        snapshot = state.update.snapshot
        gated, terminating = self._gated.update(
            snapshot.kind(Pod), snapshot.kind(EndpointSlice), generation=state.generation,
            changed=state.update.changed)
        engines = counted_engines(on_xds, self._reports.nodes)
        groups = {**self._reports.groups, **on_xds}
        pools_of = self._pools_of(state)
        sent = {group: pools_of(group) for group in {groups.get(e, "") for e in engines}
                if group} if gated or self._verdicts else {}
        # ``groups`` names every counted engine: a change of the engines is one of it
        everyone = self._everyone or groups != self._groups or sent.keys() != self._sent.keys()
        keys: Iterable[Key]
        if everyone:
            keys = gated.keys() | self._verdicts.keys()
        else:
            dirty = self._members.changed | self._gated.changed | self._again
            dirty |= self._members.pods_of(self._hosts)
            for group, pools in sent.items():
                if pools is not self._sent[group] and pools != self._sent[group]:
                    dirty |= self._members.pods_in(pools ^ self._sent[group])
            keys = dirty
        self._everyone, self._again, self._hosts = False, set(), set()
        self._groups, self._sent = groups, sent
        serves = serving(groups, pools_of)
        todo: list[tuple[Key, Pod, dict[str, str]]] = []
        for key in keys:
            pod = gated.get(key)
            if pod is None:  # gone, or no longer gated
                self._verdict(key, None)
                self._written.pop(key, None)
                continue
            if key in terminating:
                self._verdict(key, "Terminating")
                continue
            verdict = judge(members.get(key, ()), engines, self._reports.view, serves)
            self._verdict(key, verdict.reason)
            wanted = condition(pod.condition(LB_READY), verdict, now=self._now())
            if wanted is None:
                continue
            written = self._written.get(key)
            if written is not None and written[0] is pod and _same(written[1], wanted):
                continue  # written already; the watch has not shown it yet
            todo.append((key, pod, wanted))
        for reason in VERDICTS:
            self._metrics.gated_pods.labels(verdict=reason).set(self._tally[reason])
        return todo

    def wrote(self, key: Key, pod: Pod, wanted: dict[str, str]) -> None:
        """``wanted`` was written on ``pod`` (not sent again until the watch shows it)."""
        self._written[key] = (pod, wanted)

    def again(self, key: Key) -> None:
        """The write ``plan`` gave for ``key`` was not made: the next plan judges it again."""
        self._again.add(key)

    def _verdict(self, key: Key, reason: str | None) -> None:
        """Count ``key``'s verdict as ``reason`` (None: no longer gated)."""
        before = self._verdicts.pop(key, None) if reason is None else \
            self._verdicts.get(key)
        if before == reason:
            return
        if before is not None:
            self._tally[before] -= 1
        if reason is not None:
            self._verdicts[key] = reason
            self._tally[reason] += 1

    def _pools_of(self, state: State) -> Callable[[str], frozenset[str]]:
        """Group → the pools its engines are sent in ``state`` (found once per IR and
        snapshot, for the groups asked about)."""
        ir, snapshot = state.ir, state.update.snapshot
        if self._group_pools[0] is not ir or self._group_pools[1] is not snapshot:
            self._group_pools = (ir, snapshot, {})
        found = self._group_pools[2]

        def pools_of(group: str) -> frozenset[str]:
            if group not in found:
                found[group] = frozenset(subset(ir, group, group_of(snapshot)).pools)
            return found[group]
        return pools_of

    async def _patch(self, key: Key, pod: Pod, wanted: dict[str, str]) -> None:
        namespace, name = key
        body: dict[str, Any] = {"status": {"conditions": [wanted]}}
        async with self._limit:
            if not self._writes_allowed():  # leadership lost while this pass waited: drop it
                self._metrics.fenced_writes.labels(writer="readiness").inc()
                self.again(key)
                return
            try:
                await patch_pod_status(self._api, namespace, name, body)
            except ApiError as error:
                if isinstance(error, NotFound):
                    self._count("gone")
                    return
                log.warning("pod %s/%s: %s not written: %s", namespace, name, LB_READY, error)
                self._failed = True
                self.again(key)
                self._count("error")
                return
            except (OSError, TimeoutError) as exc:
                log.warning("pod %s/%s: %s not written: %s", namespace, name, LB_READY, exc)
                self._failed = True
                self.again(key)
                self._count("error")
                return
        self._count("ok")
        self.wrote(key, pod, wanted)
        self.writes += 1
        log.info("pod %s/%s %s=%s reason=%s: %s", namespace, name, LB_READY, wanted["status"],
                 wanted["reason"], wanted["message"])


    def _count(self, result: str) -> None:
        self._metrics.status_writes.labels(kind="Pod", result=result).inc()


def _same(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Equal but for the transition time (which ``now`` moves between passes)."""
    return all(a.get(k) == b.get(k) for k in ("status", "reason", "message"))


async def patch_pod_status(api: client.ApiClient, namespace: str, name: str,
                           body: Mapping[str, Any]) -> None:
    """A strategic merge patch of one Pod's status subresource (typed API errors); the answer
    (the whole Pod) is not parsed."""
    core: Any = client.CoreV1Api(api)  # the stubs do not model ``_content_type``
    try:
        resp = await core.patch_namespaced_pod_status(
            name, namespace, body, _content_type="application/strategic-merge-patch+json",
            _preload_content=False)
    except client.exceptions.ApiException as exc:
        raise api_error(exc) from None
    try:
        if resp.status >= 400:  # a raw response does not raise
            raise api_error(_Refused(resp.status, (await resp.text())[:200]))
    finally:
        resp.release()


class _Refused:
    """A refused PATCH in the shape ``api_error`` reads."""

    def __init__(self, status: int, reason: str) -> None:
        self.status, self.reason = status, reason
        self.headers: dict[str, str] = {}
