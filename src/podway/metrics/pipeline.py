"""Metrics of one pipeline, updated from the states it publishes (a reader like any other).

Labels take values from small fixed sets only (a stage, a severity, a member state, an IR kind),
never a user object's name: the series count does not grow with the configuration.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import AsyncIterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from podway import __version__
from podway.ir import MemberState
from podway.pipeline import State
from podway.translate import Severity

_STAGES = ("translate", "build", "cache")
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class StateSource(Protocol):
    def states(self) -> AsyncIterator[State]: ...


class PipelineMetrics:
    """The pipeline's series, on a registry of their own (several pipelines may share one
    process, as in tests): serve it next to the process-wide one."""

    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        self._generation = 0
        self.info = Gauge("podway_build_info", "Always 1; the running Podway's version.",
                          ["version"], registry=reg)
        self.info.labels(version=__version__).set(1)
        self.generations = Counter("podway_pipeline_generations",
                                   "Source updates the pipeline applied.", registry=reg)
        self.generation = Gauge("podway_pipeline_generation",
                                "The generation of the newest state.", registry=reg)
        self.applied_at = Gauge("podway_pipeline_last_apply_timestamp_seconds",
                                "When the newest generation was applied (Unix time).",
                                registry=reg)
        self.stage_seconds = Histogram("podway_pipeline_stage_duration_seconds",
                                       "Time one generation spent in each stage.", ["stage"],
                                       buckets=_BUCKETS, registry=reg)
        self.problems = Gauge("podway_problems", "Problems of the newest translation.",
                              ["severity"], registry=reg)
        self.rejections = Gauge("podway_engine_rejections",
                                "Resources an engine refuses now (NACKed, not since accepted).",
                                registry=reg)
        self.objects = Gauge("podway_ir_objects", "What the engines are told to serve.",
                             ["kind"], registry=reg)
        self.members = Gauge("podway_pool_members", "Pool members by state.", ["state"],
                             registry=reg)

    def observe(self, state: State, *, now: float) -> None:
        """Account for one state (a new generation, or new engine decisions on the same one)."""
        if state.generation != self._generation:
            self._generation = state.generation
            self.generations.inc()
            self.applied_at.set(now)
            timings = state.timings
            for stage, ms in zip(_STAGES, (timings.translate_ms, timings.build_ms,
                                           timings.cache_ms), strict=True):
                self.stage_seconds.labels(stage=stage).observe(ms / 1000)
        self.generation.set(state.generation)
        severities = Tally(str(p.severity) for p in state.problems)
        for severity in Severity:
            self.problems.labels(severity=str(severity)).set(severities.get(str(severity), 0))
        self.rejections.set(len(state.rejections))
        ir = state.ir
        hosts = [h for ls in ir.listeners for h in ls.virtual_hosts]
        counts = {"listener": len(ir.listeners), "virtual_host": len(hosts),
                  "route": sum(len(h.routes) for h in hosts)
                  + sum(len(ls.l4_routes) for ls in ir.listeners),
                  "pool": len(ir.pools)}
        for kind, n in counts.items():
            self.objects.labels(kind=kind).set(n)
        states = Tally(m.state for p in ir.pools.values() for m in p.members)
        for member_state in MemberState:
            self.members.labels(state=str(member_state)).set(states.get(member_state, 0))

    async def follow(self, source: StateSource) -> None:
        """Observe every state ``source`` publishes, until it stops."""
        import time

        async for state in source.states():
            self.observe(state, now=time.time())
