"""The readiness gate judges only the pods whose inputs moved, and writes as if it judged all.

Over random sequences of changes — pools put and removed, gated and ungated Pods put (with or
without the condition, as the watch shows a write), EndpointSlices with terminating pods,
engine reports (whole views, changed and removed hosts, streams closed), engines connecting to
this replica's xDS with or without a group, listeners routing to pools appearing and going
(the pools an engine group is sent), writes refused — ``ReadinessGate.plan`` gives after each
step exactly the writes a pass that judges every gated Pod from scratch gives, and its verdict
counts equal that pass's.
"""

from __future__ import annotations

from collections import Counter
from types import MappingProxyType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podway.engines.member_health import Health, HostState, MemberHealthReports, Message
from podway.ir import IR, L4Route, Listener, ListenerProtocol, Member, Pool, WeightedPool
from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.model.core import LB_READY, EndpointSlice, Pod
from podway.model.snapshot import Key
from podway.pipeline import State
from podway.programs.controller.groups import group_of, subset
from podway.programs.controller.metrics import ControllerMetrics
from podway.programs.controller.readiness import ReadinessGate
from podway.programs.controller.readiness_judge import (
    VERDICTS,
    condition,
    counted_engines,
    judge,
    serving,
)
from podway.programs.controller.readiness_members import pod_members, terminating_pods
from podway.sources.base import SourceUpdate
from podway.translate import Result
from tests import builders

from .test_readiness_members import terminating_slice

PODS = ["a", "b", "c", "d"]
POOLS = ["p1", "p2", "p3"]
ENGINES = ["e1", "e2", "e3"]
NOW = "2026-12-01T00:00:00Z"


def _host(pool: str, pod: str) -> tuple[str, str]:
    return pool, f"198.18.0.{PODS.index(pod) + 1}:8080"


def _pod(name: str, gated: bool, shown: dict[str, str] | None) -> Pod:
    return Pod.model_validate(builders.pod(
        name, None, namespace="ns", readiness_gates=[LB_READY] if gated else [],
        conditions=None if shown is None else [shown]))


def _pool(name: str, pods: list[str]) -> Pool:
    return Pool(name=name, members=tuple(
        Member(address=_host(name, pod)[1].split(":")[0], port=8080,
               origin=ObjectRef("Pod", "ns", pod)) for pod in pods))


def _listener(pool: str) -> Listener:
    return Listener(name=f"l-{pool}", address="0.0.0.0", port=9000 + POOLS.index(pool),
                    protocol=ListenerProtocol.TCP, origins=(ObjectRef("Service", "ns", pool),),
                    l4_routes=(L4Route(name=pool, backends=(WeightedPool(pool=pool),),
                                       origin=ObjectRef("Service", "ns", pool)),))


HEALTH = st.sampled_from([HostState(Health.HEALTHY), HostState(Health.PENDING, "not checked"),
                          HostState(Health.UNHEALTHY, "failed active health check")])
HOSTS = st.tuples(st.sampled_from(POOLS), st.sampled_from(PODS)).map(lambda t: _host(*t))
step = st.one_of(
    st.tuples(st.just("pool"), st.sampled_from(POOLS),
              st.lists(st.sampled_from(PODS), max_size=3, unique=True)),
    st.tuples(st.just("unpool"), st.sampled_from(POOLS), st.none()),
    st.tuples(st.just("pod"), st.sampled_from(PODS), st.booleans()),
    st.tuples(st.just("show"), st.sampled_from(PODS), st.none()),  # the watch shows a write
    st.tuples(st.just("slice"), st.sampled_from(["s1", "s2"]),
              st.lists(st.sampled_from(PODS), max_size=2)),
    st.tuples(st.just("full"), st.sampled_from(ENGINES[:2]),
              st.dictionaries(HOSTS, HEALTH, max_size=6)),
    st.tuples(st.just("news"), st.sampled_from(ENGINES[:2]),
              st.tuples(st.dictionaries(HOSTS, HEALTH, max_size=3),
                        st.lists(HOSTS, max_size=2))),
    st.tuples(st.just("close"), st.sampled_from(ENGINES[:2]), st.none()),
    st.tuples(st.just("xds"), st.sampled_from(ENGINES),
              st.sampled_from([None, "", "default", "other"])),
    st.tuples(st.just("listener"), st.sampled_from(POOLS), st.booleans()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, max_size=20),
       st.lists(st.one_of(st.none(), st.integers(0, 2)), min_size=21, max_size=21))
def test_the_gate_writes_as_if_it_judged_every_pod(steps: list[tuple[str, str, Any]],
                                                   fails: list[int | None]) -> None:
    """``fails``: per step, which write (by pod order) is refused, if any."""
    # The start: three gated pods in two pools, both reporting engines find them healthy,
    # an engine of group "default" on this xDS that is sent p1 and has not reported.
    pools = {"p1": _pool("p1", ["a", "b"]), "p2": _pool("p2", ["b", "c"])}
    pods = {("ns", name): _pod(name, True, None) for name in PODS[:3]}
    slices: dict[Key, EndpointSlice] = {}
    listeners = {"p1": _listener("p1")}
    on_xds = {"e3": "default"}
    streams = {node: object() for node in ENGINES[:2]}
    reports = MemberHealthReports()
    for node, stream in streams.items():
        reports.apply(stream, Message(node=node, full=True, hosts=dict.fromkeys(
            [_host("p1", "a"), _host("p1", "b"), _host("p2", "b"), _host("p2", "c")],
            HostState(Health.HEALTHY))))
    metrics = ControllerMetrics()
    gate = ReadinessGate(None, None, reports, lambda: on_xds,  # type: ignore[arg-type]
                         now=lambda: NOW, metrics=metrics)
    written: dict[Key, tuple[Pod, dict[str, str]]] = {}  # what the gate was told it wrote
    for generation, (action, name, arg) in enumerate([("start", "", None), *steps], start=1):
        before = {"Pod": pods, "EndpointSlice": slices}
        pools, pods, slices = dict(pools), dict(pods), dict(slices)  # new maps, same objects
        if action == "pool":
            pools[name] = _pool(name, arg)
        elif action == "unpool":
            pools.pop(name, None)
        elif action == "pod":
            pods[("ns", name)] = _pod(name, arg, None)
        elif action == "show" and ("ns", name) in written:
            pod = pods.get(("ns", name))
            pods[("ns", name)] = _pod(name, pod is not None and pod.gated(LB_READY),
                                      written[("ns", name)][1])
        elif action == "slice":
            slices[("ns", name)] = terminating_slice(name, arg, subnet=1)
        elif action == "full":
            streams[name] = object()
            reports.apply(streams[name], Message(node=name, full=True, hosts=arg))
        elif action == "news" and name in streams:
            reports.apply(streams[name], Message(node=name, full=False, hosts=arg[0],
                                                 removed=tuple(arg[1])))
        elif action == "close" and name in streams:
            reports.close(streams.pop(name))
        elif action == "xds":
            if arg is None:
                on_xds.pop(name, None)
            else:
                on_xds[name] = arg
        elif action == "listener":
            if arg:
                listeners[name] = _listener(name)
            else:
                listeners.pop(name, None)
        ir = IR(listeners=tuple(listeners[p] for p in POOLS if p in listeners),
                pools=MappingProxyType(pools))
        snapshot = Snapshot({"Pod": pods, "EndpointSlice": slices})
        # Every other step says what changed, as a source does (``SourceUpdate.changed``).
        hint = tuple((kind, key) for kind, objects in snapshot.objects.items()
                     for key in objects.keys() | before[kind].keys()
                     if objects.get(key) is not before[kind].get(key)) \
            if generation % 2 else None
        state = State(version=generation, generation=generation,
                      update=SourceUpdate(snapshot, (), changed=hint), result=Result(ir=ir))
        got = gate.plan(state, dict(on_xds))
        want, verdicts = _from_scratch(state, on_xds, reports, written)
        assert {key: wanted for key, _, wanted in got} == want
        counts = {v: int(metrics.registry.get_sample_value(
            "podway_controller_gated_pods", {"verdict": v}) or 0) for v in VERDICTS}
        assert counts == {v: verdicts.get(v, 0) for v in VERDICTS}
        for index, (key, pod, wanted) in enumerate(sorted(got, key=lambda t: t[0])):
            if index == fails[generation - 1]:  # as ``_patch`` after a refused write
                gate.again(key)
            else:  # as ``_patch`` after a write
                gate.wrote(key, pod, wanted)
                written[key] = (pod, wanted)
        for key in [k for k in written if k not in pods or not pods[k].gated(LB_READY)]:
            del written[key]  # the gate forgets pods that went or lost the gate


def _from_scratch(state: State, on_xds: dict[str, str], reports: MemberHealthReports,
                  written: dict[Key, tuple[Pod, dict[str, str]]]
                  ) -> tuple[dict[Key, dict[str, str]], dict[str, int]]:
    """The writes and verdict counts of a pass that judges every gated pod."""
    snapshot = state.update.snapshot
    members = pod_members(state.ir.pools)
    terminating = terminating_pods(snapshot.kind(EndpointSlice))
    engines = counted_engines(on_xds, reports.nodes)
    groups = {**reports.groups, **on_xds}

    def pools_of(group: str) -> frozenset[str]:
        return frozenset(subset(state.ir, group, group_of(snapshot)).pools)

    serves = serving(groups, pools_of)
    want: dict[Key, dict[str, str]] = {}
    verdicts: Counter[str] = Counter()
    for key, pod in snapshot.kind(Pod).items():
        if not pod.gated(LB_READY):
            continue
        if key in terminating:
            verdicts["Terminating"] += 1
            continue
        verdict = judge(members.get(key, ()), engines, reports.view, serves)
        verdicts[verdict.reason] += 1
        wanted = condition(pod.condition(LB_READY), verdict, now=NOW)
        known = written.get(key)
        if wanted is not None and not (known is not None and known[0] is pod
                                       and known[1] == wanted):
            want[key] = wanted
    return want, dict(verdicts)
