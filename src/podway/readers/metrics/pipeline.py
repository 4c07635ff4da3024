"""Metrics of one pipeline, updated from the states it publishes (a reader like any other).

Labels take values from small fixed sets only (a stage, a severity, a member state, an IR kind),
never a user object's name: the series count does not grow with the configuration.

``observe`` costs O(change), not O(configuration): the gauges are running totals, adjusted by
what differs from the last state observed — problems recounted only when the tuple is another
one, virtual hosts and routes per listener by the ids of its virtual hosts, members per pool by
the pools replaced (``podway.base.mapdiff.MapDiff``), or as the translator's ``IRChange`` says
when it is relative to the IR observed last (then no map of the IR is diffed). The totals always
equal a count of the whole state (tested).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from podway import __version__
from podway.base.mapdiff import MapDiff
from podway.ir import IR, IRChange, Listener, MemberState, Pool, VirtualHost
from podway.pipeline import State
from podway.status.diff import host_changes, pool_hint, problem_changes
from podway.translate import Problem, Result, Severity

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
        self._problems: tuple[Problem, ...] | None = None
        self._severities: Tally[Severity] = Tally()  # of ``_problems``
        self._ir: IR | None = None
        self._listeners: dict[tuple[str, int], _Counted] = {}  # by (name, occurrence)
        self._pools = MapDiff[str]()
        self._pool_map: dict[str, Pool] = {}
        self._members: Tally[MemberState] = Tally()

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
        if state.problems is not self._problems:
            found = problem_changes(self._problems or (), state.problems) \
                if self._problems is not None else None
            if found is None:  # every problem counted
                self._severities = Tally(p.severity for p in state.problems)
            else:  # by the problems that came and went
                self._severities.update(p.severity for p in found[1])
                self._severities.subtract(p.severity for p in found[2])
            self._problems = state.problems
            for severity in Severity:
                self.problems.labels(severity=str(severity)).set(self._severities[severity])
        self.rejections.set(len(state.rejections))
        if state.ir is not self._ir:
            change = state.result.change
            self._count(state.result, change if change is not None
                        and change.base is self._ir else None)
            self._ir = state.ir

    def _count(self, result: Result, change: IRChange | None) -> None:
        """Adjust the IR totals by the listeners' virtual hosts and the pools that changed
        (as the translator's ``change`` says, when it is relative to the IR seen last)."""
        ir = result.ir
        listeners: dict[tuple[str, int], _Counted] = {}
        seen: Tally[str] = Tally()
        for listener in ir.listeners:
            key = (listener.name, seen[listener.name])
            seen[listener.name] += 1
            listeners[key] = _counted(listener, self._listeners.pop(key, None),
                                      change.vhosts.get(listener.name) if change else None)
        self._listeners = listeners
        for name in self._pools.update(ir.pools, known=pool_hint(result)):
            was, now = self._pool_map.pop(name, None), ir.pools.get(name)
            if was is not None:
                self._members.subtract(m.state for m in was.members)
            if now is not None:
                self._members.update(m.state for m in now.members)
                self._pool_map[name] = now
        counts = {"listener": len(ir.listeners),
                  "virtual_host": sum(len(c.listener.virtual_hosts) for c in listeners.values()),
                  "route": sum(c.routes + len(c.listener.l4_routes) for c in listeners.values()),
                  "pool": len(ir.pools)}
        for kind, n in counts.items():
            self.objects.labels(kind=kind).set(n)
        for member_state in MemberState:
            self.members.labels(state=str(member_state)).set(self._members[member_state])

    async def follow(self, source: StateSource) -> None:
        """Observe every state ``source`` publishes, until it stops."""
        import time

        async for state in source.states():
            self.observe(state, now=time.time())


@dataclass(frozen=True, slots=True)
class _Counted:
    listener: Listener
    hosts: dict[int, VirtualHost]  # its virtual hosts by id
    routes: int  # HTTP routes of its virtual hosts


def _counted(listener: Listener, before: _Counted | None,
             pairs: Iterable[tuple[VirtualHost | None, VirtualHost | None]] | None) -> _Counted:
    """``listener``'s route count, from ``before``'s by the virtual hosts added and removed
    (``pairs``: the translator's word on them, see ``host_changes``)."""
    if before is not None and before.listener is listener:
        return before
    if before is None or len(before.hosts) != len(before.listener.virtual_hosts):
        hosts = dict(zip(map(id, listener.virtual_hosts), listener.virtual_hosts, strict=True))
        return _Counted(listener=listener, hosts=hosts,
                        routes=sum(len(h.routes) for h in listener.virtual_hosts))
    hosts, added, removed = host_changes(before.hosts, listener, pairs)
    if len(hosts) != len(listener.virtual_hosts):  # shared: count all
        return _Counted(listener=listener, hosts=hosts,
                        routes=sum(len(h.routes) for h in listener.virtual_hosts))
    routes = before.routes + sum(len(h.routes) for h in added) \
        - sum(len(h.routes) for h in removed)
    return _Counted(listener=listener, hosts=hosts, routes=routes)
