"""Routes that take a share of the requests (``RouteMatch.upto``, one random draw per request):
which routes a request may end on, and one verdict of theirs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from podway.ir import Route
from podway.ir.evaluate import Request, mismatch
from podway.readers.explain.model import Verdict


def drawn_shares(routes: Sequence[Route], chosen: Route, request: Request
                  ) -> list[tuple[Route, float]]:
    """``chosen`` and, when it takes only a share of the requests (``RouteMatch.upto``), the
    routes after it the rest falls through to (those that match too, up to the first without
    a bound), each with its share."""
    if chosen.match.upto is None:
        return [(chosen, 1.0)]
    out: list[tuple[Route, float]] = []
    below = 0
    for route in routes[routes.index(chosen):]:
        if mismatch(route.match, request) is not None:
            continue
        upto = route.match.upto
        top = 1_000_000 if upto is None else max(upto, below)
        if top > below:
            out.append((route, (top - below) / 1_000_000))
        below = top
        if upto is None or below >= 1_000_000:
            break
    return out


def split(verdicts: list[tuple[Verdict, float]]) -> Verdict:
    """One verdict of several, each taking its share of the requests."""
    outcomes = tuple(replace(o, percent=o.percent * fraction)
                     for verdict, fraction in verdicts for o in verdict.outcomes)
    summary = "; ".join(f"{fraction * 100:.0f} %: {verdict.summary}"
                        for verdict, fraction in verdicts)
    fix = tuple(dict.fromkeys(ref for verdict, _ in verdicts for ref in verdict.fix))
    return Verdict(summary=summary, outcomes=outcomes, fix=fix)
