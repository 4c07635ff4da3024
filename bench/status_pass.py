"""Readers of a state: what one pipeline state costs the controller's status and event writers.

Builds the convergence benchmark's cluster in memory (one Gateway, N HTTPRoutes, N Services +
EndpointSlices), applies it through a ``Pipeline`` (no source, no engines), then times, per
state, the readers the controller runs after every state (``podway.programs.controller.main``):

* the status writer's pass (status document, desired statuses, compare; PATCHes counted by a
  stub, no API): the first state (every status due), then one new HTTPRoute (p50/p99);
* the event writer's diff of two documents (``events.changes``), and the pipeline metrics'
  ``observe``, for the same one-route change;
* an EndpointSlice change (members move: nothing is due);
* one Service replaced (an annotation edited): the status writer's pass;
* the readiness gate (``ReadinessGate.plan``, no API) over N gated pods, one per pool, one
  engine reporting them all healthy: a pass that judges every gated pod (what each pass did
  before it followed the change, and still does when the engines change) against one report
  change (one member turns unhealthy) and one Pod replaced (the watch shows a write).

No wall-clock target is asserted; the figures go to docs/performance.md. Every time is also
printed as a ratio to the machine-speed reference (``bench/speedref.py``).

    python bench/status_pass.py [--sizes 1000,10000] [--tries 20] [--profile 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import speedref

from podway.engines.member_health import Health, HostState, MemberHealthReports, Message
from podway.ir import IR, Member, Pool
from podway.model import K8sObject, Snapshot
from podway.model.base import ObjectRef
from podway.model.core import LB_READY, Pod
from podway.model.loader import parse_object
from podway.model.snapshot import Key
from podway.pipeline import Pipeline, State
from podway.programs.controller.events import changes
from podway.programs.controller.leader import Fence
from podway.programs.controller.metrics import ControllerMetrics
from podway.programs.controller.readiness import ReadinessGate
from podway.programs.controller.source import KindInfo
from podway.programs.controller.status import StatusWriter
from podway.programs.controller.status_desired import Target
from podway.programs.controller.status_times import Status
from podway.readers.metrics.pipeline import PipelineMetrics
from podway.sources.base import SourceUpdate
from podway.translate import Result, TranslateOptions

GW = "gateway.networking.k8s.io"
NS = "bench"
OPTS = TranslateOptions(address="198.18.0.1")


def obj(doc: dict[str, Any]) -> K8sObject:
    parsed, errors = parse_object(doc)
    assert parsed is not None, errors
    return parsed


def service(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"svc-{i}", "namespace": NS},
            "spec": {"selector": {"app": f"a{i}"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}


def endpoint_slice(i: int, last: int = 1) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"svc-{i}-1", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": f"svc-{i}"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": [f"198.18.{i % 200}.{last}"],
                           "conditions": {"ready": True}}]}


def route(name: str, backend: int) -> dict[str, Any]:
    return {"apiVersion": f"{GW}/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"parentRefs": [{"name": "edge"}], "hostnames": [f"{name}.bench.test"],
                     "rules": [{"backendRefs": [{"name": f"svc-{backend}", "port": 80}]}]}}


def cluster(count: int) -> Snapshot:
    docs: list[dict[str, Any]] = [
        {"apiVersion": f"{GW}/v1", "kind": "GatewayClass", "metadata": {"name": "podway"},
         "spec": {"controllerName": "podway.io/gateway-controller"}},
        {"apiVersion": f"{GW}/v1", "kind": "Gateway",
         "metadata": {"name": "edge", "namespace": NS},
         "spec": {"gatewayClassName": "podway", "listeners": [
             {"name": "http", "protocol": "HTTP", "port": 8080,
              "allowedRoutes": {"namespaces": {"from": "All"}}}]}}]
    for i in range(count):
        docs += [service(i), endpoint_slice(i), route(f"r{i}", i)]
    return Snapshot.of_objects(obj(d) for d in docs)


class _Writer(StatusWriter):
    """The status writer with PATCHes counted, not sent."""

    patched = 0

    async def _patch(self, target: Target, wanted: Status, status: Status, fence: Fence
                     ) -> None:
        self.patched += 1
        self._written[target] = status
        self._wanted[target] = wanted


def kind_info(kind: str) -> KindInfo:
    return KindInfo(kind=kind, group=GW, version="v1", plural=kind.lower() + "s",
                    namespaced=True)


class _NoSource:
    def watch(self) -> AsyncIterator[SourceUpdate]:  # never run: updates are applied
        raise NotImplementedError


def put(snapshot: Snapshot, doc: dict[str, Any]) -> tuple[Snapshot, SourceUpdate]:
    o = obj(doc)
    after = snapshot.replace(o.KIND, {o.key: o})
    return after, SourceUpdate(after, (), changed=((o.KIND, o.key),))


async def one_size(count: int, tries: int, ref: speedref.Reference,
                   profile: bool) -> None:
    print(f"== {count} routes", flush=True)
    snapshot = cluster(count)
    pipeline = Pipeline(_NoSource(), translate=OPTS)  # type: ignore[arg-type]
    writer = _Writer(None, pipeline, current=lambda *_: None,  # type: ignore[arg-type]
                     kind_info=kind_info, opts=OPTS, lb_address="198.18.0.100",
                     metrics=ControllerMetrics())
    metrics = PipelineMetrics()
    state = pipeline.apply(SourceUpdate(snapshot, ()))
    t0 = time.perf_counter()
    await writer.write(state)
    first = time.perf_counter() - t0
    print(f"  first state: {writer.patched} PATCHes due, pass {ms(first, ref)}", flush=True)
    doc = writer.last_document
    passes, diffs, observed = [], [], []
    profiler = cProfile.Profile() if profile else None
    for n in range(tries):
        snapshot, update = put(snapshot, route(f"new{n}", n))
        state = pipeline.apply(update)
        before = writer.patched
        if profiler:
            profiler.enable()
        t0 = time.perf_counter()
        await writer.write(state)
        t1 = time.perf_counter()
        assert writer.last_document is not None
        due = changes(doc, writer.last_document)
        t2 = time.perf_counter()
        metrics.observe(state, now=0.0)
        t3 = time.perf_counter()
        if profiler:
            profiler.disable()
        doc = writer.last_document
        passes.append(t1 - t0)
        diffs.append(t2 - t1)
        observed.append(t3 - t2)
        assert writer.patched - before == 2, writer.patched - before  # the route, the Gateway
        assert [d.ref.name for d in due] == [f"new{n}"], due
    for label, values in (("one new route: status pass", passes),
                          ("one new route: events diff", diffs),
                          ("one new route: metrics observe", observed)):
        print(f"  {label:<34} p50 {ms(pct(values, 50), ref)}  p99 {ms(pct(values, 99), ref)}")
    snapshot, update = put(snapshot, endpoint_slice(0, last=2))
    state = pipeline.apply(update)
    t0 = time.perf_counter()
    due_n = await writer.write(state)
    print(f"  members move: status pass {ms(time.perf_counter() - t0, ref)}, {due_n} due")
    await services_replaced(snapshot, pipeline, writer, tries, ref)
    if hasattr(ReadinessGate, "plan"):  # absent before the gate followed the change
        readiness(count, tries, ref)
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)


async def services_replaced(snapshot: Snapshot, pipeline: Pipeline, writer: _Writer,
                            tries: int, ref: speedref.Reference) -> None:
    """One Service replaced per state (an annotation edited): the status writer's pass."""
    replaced = []
    for n in range(tries):
        edited = service(n)
        edited["metadata"]["annotations"] = {"bench.podway.io/edit": str(n)}
        snapshot, update = put(snapshot, edited)
        state = pipeline.apply(update)
        t0 = time.perf_counter()
        await writer.write(state)
        replaced.append(time.perf_counter() - t0)
    print(f"  {'one Service replaced: status pass':<34} p50 {ms(pct(replaced, 50), ref)}  "
          f"p99 {ms(pct(replaced, 99), ref)}")


def readiness(count: int, tries: int, ref: speedref.Reference) -> None:
    """The readiness gate's pass: every gated pod judged, against one change (module doc)."""
    pods: dict[Key, Pod] = {}
    pools: dict[str, Pool] = {}
    for i in range(count):
        pods[(NS, f"pod-{i}")] = Pod.model_validate({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{i}", "namespace": NS},
            "spec": {"readinessGates": [{"conditionType": LB_READY}]}})
        name = f"pool/{NS}/svc-{i}/80"
        pools[name] = Pool(name=name, members=(Member(
            address=f"198.18.{i // 250}.{i % 250 + 1}", port=8080,
            origin=ObjectRef("Pod", NS, f"pod-{i}")),))
    hosts = {(name, f"{m.address}:{m.port}"): HostState(Health.HEALTHY)
             for name, pool in pools.items() for m in pool.members}
    reports, stream = MemberHealthReports(), object()
    reports.apply(stream, Message(node="edge-1", full=True, hosts=hosts))
    gate = ReadinessGate(None, None, reports, dict,  # type: ignore[arg-type]
                         metrics=ControllerMetrics())

    ir = IR(pools=MappingProxyType(pools))  # members do not move here

    def state_of(generation: int, changed: tuple[tuple[str, Key], ...] | None) -> State:
        return State(version=generation, generation=generation,
                     update=SourceUpdate(Snapshot({"Pod": dict(pods)}), (), changed=changed),
                     result=Result(ir=ir))

    state = state_of(1, None)
    t0 = time.perf_counter()
    due = len(gate.plan(state, {}))
    print(f"  readiness, first pass: {due} writes due, {ms(time.perf_counter() - t0, ref)}")
    every, report, pod = [], [], []
    keys = list(hosts)
    for n in range(tries):
        gate.judge_everyone()  # what every pass did before it followed the change
        t0 = time.perf_counter()
        gate.plan(state, {})
        every.append(time.perf_counter() - t0)
        sick = HostState(Health.UNHEALTHY if n % 2 == 0 else Health.HEALTHY, "bench")
        reports.apply(stream, Message(node="edge-1", full=False, hosts={keys[n]: sick}))
        t0 = time.perf_counter()
        due = len(gate.plan(state, {}))
        report.append(time.perf_counter() - t0)
        assert due == 1, due
        key = (NS, f"pod-{count - 1 - n}")
        pods[key] = pods[key].model_copy()
        state = state_of(n + 2, (("Pod", key),))  # as the source says it
        t0 = time.perf_counter()
        gate.plan(state, {})
        pod.append(time.perf_counter() - t0)
    for label, values in (("readiness: judge every gated pod", every),
                          ("readiness: one report change", report),
                          ("readiness: one Pod replaced", pod)):
        print(f"  {label:<34} p50 {ms(pct(values, 50), ref)}  p99 {ms(pct(values, 99), ref)}")


def pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(seconds: float, ref: speedref.Reference) -> str:
    return f"{seconds * 1000:7.2f} ms ({ref.ratio(seconds)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--profile", type=int, default=0,
                        help="cProfile the one-route passes of this size")
    args = parser.parse_args()
    ref = speedref.measure()
    print(f"speed reference: {ref.seconds * 1000:.0f} ms", flush=True)
    for size in (int(s) for s in args.sizes.split(",")):
        asyncio.run(one_size(size, args.tries, ref, profile=size == args.profile))


if __name__ == "__main__":
    main()
