"""The per-route diff of two entry points' answers to the same request set.

``diff_answers`` is the pure heart: which fields of two ``Answer``s differ (status, error,
backend, what the backend saw, redirect target, each response header). ``run`` replays every
probe against both sides concurrently and groups the results by the route label of the probe;
``Report`` renders as text (only what differs, then one summary line) or as JSON (every route,
with counts), and ``Report.differs`` decides the exit status of ``podway migrate compare``.

Invariant: the report lists routes and requests in the order of the request set, so two runs
over unchanged inputs print the same report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from podway.tools.migrate.probes import Probe
from podway.tools.migrate.replay import Answer, EntryPoint, Replayer, ReplayOptions


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldDiff:
    field: str
    old: str
    new: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    probe: Probe
    old: Answer
    new: Answer
    diffs: tuple[FieldDiff, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteReport:
    route: str
    results: tuple[Result, ...]

    @property
    def differing(self) -> tuple[Result, ...]:
        return tuple(r for r in self.results if r.diffs)


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    routes: tuple[RouteReport, ...]

    @property
    def requests(self) -> int:
        return sum(len(r.results) for r in self.routes)

    @property
    def unanswered(self) -> int:
        """Requests one side or both did not answer (errors that agree are no difference, but a
        report where nothing answered proves nothing)."""
        return sum(r.old.status is None or r.new.status is None
                   for route in self.routes for r in route.results)

    @property
    def differs(self) -> bool:
        return any(r.differing for r in self.routes)

    def to_data(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "differing_requests": sum(len(r.differing) for r in self.routes),
            "unanswered_requests": self.unanswered,
            "routes": [{
                "route": route.route,
                "requests": len(route.results),
                "differing": [{
                    "request": _probe_data(result.probe),
                    "fields": {d.field: {"old": d.old, "new": d.new} for d in result.diffs},
                } for result in route.differing],
            } for route in self.routes],
        }

    def to_text(self) -> list[str]:
        lines: list[str] = []
        for route in self.routes:
            bad = route.differing
            if not bad:
                continue
            lines.append(f"{route.route}: {len(bad)} of {len(route.results)} requests differ")
            for result in bad:
                lines.append(f"  {result.probe.describe()}")
                lines.extend(f"    {d.field}: old {d.old!r}, new {d.new!r}"
                             for d in result.diffs)
        differing = sum(len(r.differing) for r in self.routes)
        routes = sum(1 for r in self.routes if r.differing)
        lines.append(f"{self.requests} requests on {len(self.routes)} routes: "
                     + (f"{differing} differ on {routes} routes" if differing
                        else "no differences")
                     + (f"; {self.unanswered} got no answer from a side" if self.unanswered
                        else ""))
        return lines


def _probe_data(probe: Probe) -> dict[str, Any]:
    return {"method": probe.method, "scheme": probe.scheme, "host": probe.host,
            "path": probe.path, "headers": dict(probe.headers)}


def _status(answer: Answer) -> str:
    return "" if answer.status is None else str(answer.status)


def diff_answers(old: Answer, new: Answer) -> tuple[FieldDiff, ...]:
    """Every field a client or backend could tell apart, in a fixed order."""
    out: list[FieldDiff] = []
    pairs = (("status", _status(old), _status(new)), ("error", old.error, new.error),
             ("backend", old.backend, new.backend),
             ("upstream path", old.upstream_path, new.upstream_path),
             ("upstream host", old.upstream_host, new.upstream_host),
             ("location", old.location, new.location))
    out.extend(FieldDiff(field=name, old=a, new=b) for name, a, b in pairs if a != b)
    for label, left, right in (("header", old.headers, new.headers),
                               ("upstream header", old.upstream_headers, new.upstream_headers)):
        a, b = dict(left), dict(right)
        out.extend(FieldDiff(field=f"{label} {name}", old=a.get(name, ""), new=b.get(name, ""))
                   for name in sorted(a.keys() | b.keys()) if a.get(name) != b.get(name))
    return tuple(out)


async def run(probes: Sequence[Probe], *, old: EntryPoint, new: EntryPoint,
              opts: ReplayOptions) -> Report:
    """Replay ``probes`` against both sides and report per route."""
    async with Replayer(opts) as replayer:
        async def one(probe: Probe) -> Result:
            a, b = await asyncio.gather(replayer.send(old, probe), replayer.send(new, probe))
            return Result(probe=probe, old=a, new=b, diffs=diff_answers(a, b))

        results = await asyncio.gather(*(one(p) for p in probes))
    grouped: dict[str, list[Result]] = {}
    for result in results:
        grouped.setdefault(result.probe.route, []).append(result)
    return Report(routes=tuple(RouteReport(route=route, results=tuple(items))
                               for route, items in grouped.items()))
