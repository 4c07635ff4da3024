"""The answer of ``podway explain``: every decision on a request's way, and the verdict.

Plain frozen values, so one explanation renders as a rich report, as JSON (``to_data``) and is
compared in tests. ``Outcome``s are the possible answers with their share of requests: a
weighted split has several, everything else one. ``Outcome.kind`` is what the engine does;
``status_class`` is what a client sees (``2xx`` for a request a member serves: the member
decides the exact status; ``reset`` for a connection closed without an HTTP answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from podway.model.base import ObjectRef
from podway.readers.explain.query import Query
from podway.translate.core.problems import Problem


class Mark(StrEnum):
    OK = "ok"  # this step passed
    FAIL = "fail"  # the request stops here
    INFO = "info"  # worth knowing, changes nothing


class OutcomeKind(StrEnum):
    SERVED = "served"  # forwarded to a member of ``pool``
    DIRECT = "direct"  # answered by the engine (direct response, status share, 404, 421)
    REDIRECT = "redirect"
    NO_MEMBER = "no_member"  # 503: the pool has no member that can take it
    NO_POOL = "no_pool"  # 503 (HTTP) / reset (L4): the pool is not configured
    RESET = "reset"  # no listener, no TLS chain, no L4 route: the connection is closed


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    stage: str  # listener, tls, virtual_host, route, filter, engine (kernel DNAT), pool
    mark: Mark
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One route of the chosen virtual host, in precedence order."""

    name: str
    origin: ObjectRef
    match: str  # every condition, in words
    matched: bool
    chosen: bool
    why: str  # the first differing condition, or what made it win or lose


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberView:
    address: str
    port: int
    state: str  # ready, not_ready, draining
    receives: bool  # gets new requests (state ready and, live, the engine agrees)
    why: str = ""
    weight: int = 1
    node: str | None = None
    origin: ObjectRef | None = None
    health: str | None = None  # the engine's live health flags (None: not known)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolView:
    name: str
    percent: float  # share of the route's requests
    exists: bool
    mode: str = ""  # how members reach pods: clusterip, nodeportlocal, nodeport (hop)
    protocol: str = ""
    lb_policy: str = ""
    origin: ObjectRef | None = None
    members: tuple[MemberView, ...] = ()

    @property
    def receiving(self) -> int:
        return sum(m.receives for m in self.members)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    kind: OutcomeKind
    percent: float = 100.0
    status: int | None = None  # the engine's own answer; None when a member answers
    pool: str | None = None

    @property
    def status_class(self) -> str:
        if self.kind is OutcomeKind.SERVED:
            return "2xx"
        if self.kind is OutcomeKind.RESET or self.status is None:
            return "reset"
        return f"{self.status // 100}xx"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    summary: str  # "served by pool/…", "404 because …", …
    outcomes: tuple[Outcome, ...]
    fix: tuple[ObjectRef, ...] = ()  # the objects to look at
    problems: tuple[Problem, ...] = ()  # their problems


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    query: Query
    steps: tuple[Step, ...]
    verdict: Verdict
    listener: str | None = None
    virtual_host: str | None = None
    candidates: tuple[Candidate, ...] = ()
    route: str | None = None
    filters: tuple[str, ...] = ()
    pools: tuple[PoolView, ...] = ()

    def to_data(self) -> dict[str, Any]:
        """Plain data for ``--json`` and the admin endpoint (stable keys)."""
        q = self.query
        return {
            "query": {"scheme": q.scheme, "host": q.host, "address": q.address, "port": q.port,
                      "path": q.path, "method": q.method, "headers": dict(q.headers),
                      "sni": q.sni, "source_ip": q.source_ip},
            "steps": [{"stage": s.stage, "mark": str(s.mark), "text": s.text}
                      for s in self.steps],
            "listener": self.listener,
            "virtual_host": self.virtual_host,
            "routes": [{"name": c.name, "origin": str(c.origin), "match": c.match,
                        "matched": c.matched, "chosen": c.chosen, "why": c.why}
                       for c in self.candidates],
            "route": self.route,
            "filters": list(self.filters),
            "pools": [_pool_data(p) for p in self.pools],
            "verdict": {
                "summary": self.verdict.summary,
                "outcomes": [{"kind": str(o.kind), "percent": round(o.percent, 3),
                              "status": o.status, "status_class": o.status_class,
                              "pool": o.pool} for o in self.verdict.outcomes],
                "fix": [str(r) for r in self.verdict.fix],
                "problems": [{"object": str(p.ref), "severity": str(p.severity),
                              "reason": str(p.reason), "message": p.message, "field": p.field}
                             for p in self.verdict.problems],
            },
        }


def _pool_data(pool: PoolView) -> dict[str, Any]:
    return {"name": pool.name, "percent": round(pool.percent, 3), "exists": pool.exists,
            "mode": pool.mode, "protocol": pool.protocol, "lb_policy": pool.lb_policy,
            "origin": str(pool.origin) if pool.origin else None,
            "members": [{"address": m.address, "port": m.port, "state": m.state,
                         "receives": m.receives, "why": m.why, "weight": m.weight,
                         "node": m.node, "origin": str(m.origin) if m.origin else None,
                         "health": m.health} for m in pool.members]}
