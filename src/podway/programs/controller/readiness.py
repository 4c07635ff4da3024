"""The readiness gate: a Pod that lists ``podway.io/lb-ready`` in ``spec.readinessGates`` is
Ready only once every engine serving it has found it healthy.

Inputs: the pipeline's states (which pools have which pod as a member, at which address; the
gated Pods and their current condition, ``podway.sources.kube_kinds.slim_pod``), the engines
connected over ADS to this replica now (node ids) and each engine's member health report
(``podway.engines.member_health``, sent by ``podway.engines.reporter`` to every replica).

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
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from podway.engines.member_health import HostKey, MemberHealthReports
from podway.kube.errors import ApiError, NotFound, api_error
from podway.model.core import LB_READY, EndpointSlice, Pod
from podway.model.snapshot import Key
from podway.pipeline import Pipeline, State
from podway.programs.controller.groups import group_of, subset
from podway.programs.controller.metrics import ControllerMetrics
from podway.programs.controller.readiness_judge import (
    VERDICTS,
    condition,
    counted_engines,
    judge,
    serving,
)
from podway.programs.controller.readiness_members import GatedPods, PodMembers
from podway.status.diff import pool_hint

log = logging.getLogger(__name__)

_RETRY_S = 1.0  # after a failed write


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
