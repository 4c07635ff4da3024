"""The pipeline gauges are running totals adjusted by what changed; they always equal a count of
the whole state, over random sequences of changes (the status document's steps: objects put,
replaced, deleted; translations from scratch that keep no identity)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podway.ir import IR, MemberState
from podway.model import Snapshot
from podway.pipeline import State
from podway.readers.metrics.pipeline import PipelineMetrics
from podway.sources.base import SourceUpdate
from podway.translate import IncrementalTranslator, Severity, TranslateOptions, translate
from tests.unit.status.test_incremental import BASE, _apply, _parsed, steps
from tests.unit.translate.gateway_strategies import gateway, http_route
from tests.unit.translate.strategies import endpoint_slice, ingress, service

OPTS = TranslateOptions(address="198.18.0.1")


def whole(ir: IR) -> dict[str, float]:
    """Every gauge counted from scratch, as ``observe`` did before it kept totals."""
    hosts = [h for ls in ir.listeners for h in ls.virtual_hosts]
    out = {"listener": len(ir.listeners), "virtual_host": len(hosts),
           "route": sum(len(h.routes) for h in hosts) + sum(len(ls.l4_routes)
                                                           for ls in ir.listeners),
           "pool": len(ir.pools)}
    members = Counter(m.state for p in ir.pools.values() for m in p.members)
    out.update({f"members:{s}": members.get(s, 0) for s in MemberState})
    return {k: float(v) for k, v in out.items()}


def gauges(metrics: PipelineMetrics) -> dict[str, float]:
    reg = metrics.registry
    out = {kind: reg.get_sample_value("podway_ir_objects", {"kind": kind})
           for kind in ("listener", "virtual_host", "route", "pool")}
    out.update({f"members:{s}": reg.get_sample_value("podway_pool_members", {"state": str(s)})
                for s in MemberState})
    return {k: v or 0.0 for k, v in out.items()}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(http_route(), service(), gateway(), ingress(), endpoint_slice()),
                max_size=10), steps)
def test_gauges_equal_a_count_of_the_whole_state(start: list[Any],
                                                 sequence: list[tuple[str, Any]]) -> None:
    snapshot = Snapshot.of_objects(o for o in map(_parsed, [*BASE, *start]) if o is not None)
    translator = IncrementalTranslator(OPTS)
    metrics = PipelineMetrics()
    for generation, step in enumerate([("first", None), *sequence], start=1):
        snapshot = _apply(snapshot, step)
        result = translator.update(snapshot)
        if step[0] == "fresh":
            result = translate(snapshot, OPTS)
        metrics.observe(State(version=generation, generation=generation,
                              update=SourceUpdate(snapshot, ()), result=result), now=0.0)
        assert gauges(metrics) == whole(result.ir)
        errors = sum(p.severity is Severity.ERROR for p in result.problems)
        assert metrics.registry.get_sample_value(
            "podway_problems", {"severity": str(Severity.ERROR)}) == errors


def test_member_gauges_follow_pools_replaced_and_gone() -> None:
    """Members move (a pool replaced), then the pool goes: the gauges follow each state."""
    def endpoints(*ready: bool) -> dict[str, Any]:
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "web-1", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4", "ports": [{"port": 8080}],
                "endpoints": [{"addresses": [f"198.18.1.{i + 1}"],
                               "conditions": {"ready": r}} for i, r in enumerate(ready)]}

    web = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}}
    snapshot = Snapshot.of_objects(o for o in map(_parsed, [web, endpoints(True)]) if o)
    translator, metrics = IncrementalTranslator(OPTS), PipelineMetrics()
    seen = []
    for generation, step in enumerate([("first", None), ("put", endpoints(True, False, True)),
                                       ("delete", 0), ("delete", 0)], start=1):
        snapshot = _apply(snapshot, step)
        result = translator.update(snapshot)
        metrics.observe(State(version=generation, generation=generation,
                              update=SourceUpdate(snapshot, ()), result=result), now=0.0)
        assert gauges(metrics) == whole(result.ir)
        seen.append(gauges(metrics))
    assert seen[0][f"members:{MemberState.READY}"] == 1
    assert seen[1][f"members:{MemberState.READY}"] == 2
    assert seen[-1]["pool"] == 0
