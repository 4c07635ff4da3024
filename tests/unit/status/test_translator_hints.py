"""Readers that take the translator's word on what changed (``IRChange``: pools replaced, virtual
hosts replaced per listener) instead of diffing the IR's maps decide as from scratch.

A seeded random sequence of route changes (new, replaced, deleted; hostnames shared between
routes, so virtual hosts merge and split), endpoint moves and Service edits, each given to the
translator with its change list as a source does, so it patches and says what changed. After
every step: the status document equals ``build`` from scratch, the pipeline gauges a count of
the whole IR, the readiness gate's pod members ``pod_members``, the NodePortLocal plan
``npl_plan``; and the sequence did take the translator's word (with virtual hosts removed).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from podway.model import Service, Snapshot
from podway.model.snapshot import Key
from podway.pipeline import State
from podway.programs.controller.modes import NplPlanner, npl_plan, served_services
from podway.programs.controller.readiness_members import PodMembers, pod_members
from podway.readers.metrics import pipeline as metrics_pipeline
from podway.readers.metrics.pipeline import PipelineMetrics
from podway.sources.base import SourceUpdate
from podway.status import build
from podway.status import incremental as status_incremental
from podway.status.diff import pool_hint
from podway.status.incremental import DocumentBuilder
from podway.translate import BackendMode, IncrementalTranslator, TranslateOptions
from podway.translate.pools.backends import service_mode
from tests import builders
from tests.unit.readers.metrics.test_pipeline_incremental import gauges, whole
from tests.unit.status.test_incremental import _parsed
from tests.unit.translate.gateway_strategies import OUR_CLASS

OPTS = TranslateOptions(address="198.18.0.1", mode=BackendMode.NODEPORTLOCAL)
GATEWAY = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
           "metadata": {"name": "gw", "namespace": "default"},
           "spec": {"gatewayClassName": "podway",
                    "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}
SERVICES = 6


def _service(i: int, edit: int = 0) -> dict[str, Any]:
    return builders.service(f"s{i}", port_name=None,
                            annotations={"test.podway.io/edit": str(edit)})


def _slice(i: int, last: int) -> dict[str, Any]:
    return builders.endpoint_slice(f"s{i}", port_name=None, endpoints=[
        builders.endpoint(f"198.18.{i}.{last}", node=None, pod=f"p{i}-{last}")])


def _route(name: str, hosts: list[str], backend: int) -> dict[str, Any]:
    return builders.http_route(name, hosts, f"s{backend}", parent="gw", parent_namespace=None)


def _step(rng: random.Random, n: int) -> dict[str, Any] | tuple[str, str]:
    roll = rng.random()
    if roll < 0.55:
        hosts = rng.sample([f"h{i}.example.com" for i in range(8)], rng.choice([1, 1, 1, 2]))
        return _route(f"r{rng.randrange(12)}", hosts, rng.randrange(SERVICES))
    if roll < 0.75:
        return ("HTTPRoute", f"r{rng.randrange(12)}")  # deleted
    if roll < 0.9:
        return _slice(rng.randrange(SERVICES), rng.randint(1, 3))
    return _service(rng.randrange(SERVICES), edit=n)


@pytest.mark.parametrize("seed", [1, 2, 3, 6])
def test_readers_taking_the_translator_s_word_equal_from_scratch(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    taken: Counter[str] = Counter()
    original = status_incremental.host_changes

    def spy(before: Any, listener: Any, pairs: Any) -> Any:
        pairs = tuple(pairs) if pairs is not None else None
        hosts, added, removed = original(before, listener, pairs)
        if pairs is not None and hosts is before:  # the word was taken: no diff
            taken["hosts"] += 1
            taken["removed"] += bool(removed)
        return hosts, added, removed

    monkeypatch.setattr(status_incremental, "host_changes", spy)
    monkeypatch.setattr(metrics_pipeline, "host_changes", spy)
    docs = [OUR_CLASS, GATEWAY, *(_service(i) for i in range(SERVICES)),
            *(_slice(i, 1) for i in range(SERVICES))]
    snapshot = Snapshot.of_objects(o for o in map(_parsed, docs) if o is not None)
    translator, builder, metrics = IncrementalTranslator(OPTS), DocumentBuilder(), PipelineMetrics()
    members, planner = PodMembers(), NplPlanner()
    rng = random.Random(seed)
    changed: tuple[tuple[str, Key], ...] | None = None
    for generation in range(1, 80):
        if generation > 1:
            step = _step(rng, generation)
            if isinstance(step, tuple):
                key = ("default", step[1])
                snapshot = snapshot.replace(step[0], {key: None})
                changed = ((step[0], key),)
            else:
                obj = _parsed(step)
                assert obj is not None
                snapshot = snapshot.replace(obj.KIND, {obj.key: obj})
                changed = ((obj.KIND, obj.key),)
        result = translator.update(snapshot, changed)
        taken["pools"] += result.change is not None
        state = State(version=generation, generation=generation,
                      update=SourceUpdate(snapshot, (), changed=changed), result=result)
        assert builder.of_state(state) == build(snapshot=snapshot, result=result,
                                                generation=generation)
        metrics.observe(state, now=0.0)
        assert gauges(metrics) == whole(result.ir)
        known = pool_hint(result)
        assert members.update(result.ir.pools, known=known) == pod_members(result.ir.pools)
        services = snapshot.kind(Service)
        assert planner.plan(services, result.ir.pools, known=known,
                            requested=lambda s: service_mode(s, OPTS), default=OPTS.mode,
                            held={}) == npl_plan(
            services.values(), served=served_services(result.ir),
            requested={k: service_mode(s, OPTS) for k, s in services.items()})
    assert taken["pools"] > 20
    assert taken["hosts"] > 15
    assert taken["removed"] > 5
