"""The dashboard's one document: a state (and maybe two engine samples) → plain JSON data.

Pure: no I/O, no clock. NSX ALB's controller shows virtual services → pools → members with
health; this is the same tree for Podway: listeners (VIP:port) → virtual hosts → routes, each
route with its pools and verdict; pools → members with mode, Kubernetes readiness and Envoy's
health; then the problems and the engines' refusals.

A route's *verdict* is what a request it matches gets before any member answers: ``ok``,
``redirect``, or an error status with why (``404``/``500``/``503`` from a direct response, an
unresolved backend, or a pool with no member that can take traffic). Rows with an error verdict
carry the ``podway explain`` command that walks such a request, and a link to ``/explain``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from podway.envoy.config.common import stat_prefix
from podway.ir import (
    DirectResponse,
    Forward,
    HealthCheck,
    HealthCheckKind,
    Listener,
    ListenerProtocol,
    Member,
    MemberState,
    Pool,
    Redirect,
    Route,
    VirtualHost,
)
from podway.pipeline import Rejection, State
from podway.readers.dashboard.engine_view import Figures, HostHealth, Rates, Sample, rates

MAX_PROBLEMS = 200  # shown; the count says how many there are


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewOptions:
    mode: str = ""  # the backend mode pools were resolved with (nodeportlocal, clusterip, …)
    explain_args: tuple[str, ...] = ()  # put before the URL: e.g. ("--manifests", "/srv/lb")
    refresh_s: float = 2.0
    detailed_stats: bool = False  # per-pool figures exist (Envoy was asked for them)
    # An engine's admin is known (False: a controller without --engine-admin; members then
    # show readiness only, and the page says so).
    engine_known: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class SeenRejection:
    """An engine refusal and when (wall-clock text, for people) it was first seen."""

    at: str
    rejection: Rejection


@dataclass(frozen=True, slots=True, kw_only=True)
class _Context:
    pools: Mapping[str, Pool]
    options: ViewOptions
    now: Sample | None
    before: Sample | None
    seconds: float  # between the two samples

    def figures(self, family: str, key: str) -> dict[str, Any] | None:
        return _figures(family, key, self.now, self.before, self.seconds)


def build(state: State | None, *, options: ViewOptions, now: Sample | None = None,
          before: Sample | None = None, nacks: Sequence[SeenRejection] = ()) -> dict[str, Any]:
    """The whole page's data."""
    if state is None:
        return {"ready": False, "refresh_s": options.refresh_s, "listeners": [], "pools": [],
                "problems": [], "problem_count": 0, "rejections": [], "recent_nacks": [],
                "engine": _engine(now, options)}
    ctx = _Context(pools=state.ir.pools, options=options, now=now, before=before,
                   seconds=(now.taken_at - before.taken_at) if now and before else 0.0)
    return {
        "ready": True,
        "version": state.version,
        "generation": state.generation,
        "refresh_s": options.refresh_s,
        "mode": options.mode,
        "engine": _engine(now, options),
        "listeners": [_listener(ls, ctx) for ls in state.ir.listeners],
        "pools": [_pool(p, ctx) for p in ctx.pools.values()],
        "problems": [{"severity": str(p.severity), "object": str(p.ref), "reason": str(p.reason),
                      "message": p.message, "field": p.field}
                     for p in state.problems[:MAX_PROBLEMS]],
        "problem_count": len(state.problems),
        "rejections": [_rejection(r) for r in state.rejections],
        "recent_nacks": [{"at": s.at, **_rejection(s.rejection)} for s in nacks],
    }


def _engine(now: Sample | None, options: ViewOptions) -> dict[str, Any]:
    return {"seen": now is not None, "known": options.engine_known,
            "detailed_stats": options.detailed_stats}


def _rejection(r: Rejection) -> dict[str, Any]:
    return {"node": r.node, "type": r.type_name, "resource": r.resource, "message": r.message}


def _figures(family: str, key: str, now: Sample | None, before: Sample | None,
             seconds: float) -> dict[str, Any] | None:
    """Figures of listener (``family="listeners"``) or pool (``"pools"``) ``key``, if known."""
    if now is None:
        return None
    current: Figures | None = getattr(now, family).get(key)
    if current is None:
        return None
    previous: Figures | None = getattr(before, family).get(key) if before else None
    rate: Rates | None = rates(previous, current, seconds)
    return {"total": current.total, "errors_5xx": current.errors_5xx,
            "rps": None if rate is None else round(rate.rps, 2),
            "error_ratio": None if rate is None or rate.error_ratio is None
            else round(rate.error_ratio, 4),
            "p50_ms": current.p50_ms, "p99_ms": current.p99_ms}


def _listener(ls: Listener, ctx: _Context) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": ls.name, "address": ls.address, "port": ls.port, "protocol": str(ls.protocol),
        "origins": [str(o) for o in ls.origins],
        "traffic": ctx.figures("listeners", stat_prefix(ls.name)),
        "virtual_hosts": [_vhost(ls, vh, ctx) for vh in ls.virtual_hosts],
        "l4_routes": [{"name": r.name, "hostnames": list(r.hostnames), "origin": str(r.origin),
                       "pools": [b.pool for b in r.backends if b.pool]} for r in ls.l4_routes],
    }
    if ls.protocol is ListenerProtocol.HTTPS:
        out["certificates"] = [{"name": c.name, "hostnames": list(c.hostnames)}
                               for c in ls.certificates]
    return out


def _vhost(ls: Listener, vh: VirtualHost, ctx: _Context) -> dict[str, Any]:
    return {"name": vh.name, "hostname": vh.hostname,
            "routes": [_route(ls, vh, r, ctx) for r in vh.routes]}


def _route(ls: Listener, vh: VirtualHost, route: Route, ctx: _Context) -> dict[str, Any]:
    status, why = verdict(route, ctx.pools, ctx.now)
    match = route.match
    out: dict[str, Any] = {
        "name": route.name, "origin": str(route.origin),
        "match": f"{match.path.kind} {match.path.value}"
                 + (f" {match.method}" if match.method else "")
                 + "".join(f" {h.name}={h.value}" for h in match.headers),
        "action": _action(route),
        "pools": [{"name": b.pool, "weight": b.weight} for b in _backends(route) if b.pool],
        "verdict": status, "why": why,
        "traffic": [{"pool": b.pool, **fig} for b in _backends(route) if b.pool
                    for fig in [ctx.figures("pools", b.pool)] if fig],
    }
    if status not in ("ok", "redirect"):
        url = request_url(ls, vh, route)
        command = shlex.join(["podway", "explain", *ctx.options.explain_args, *_method(route),
                              url])
        out["explain"] = {"url": url, "command": command,
                          "href": f"/explain?url={quote(url, safe='')}"}
    return out


def _backends(route: Route) -> tuple[Any, ...]:
    return route.action.backends if isinstance(route.action, Forward) else ()


def _method(route: Route) -> list[str]:
    return ["--method", route.match.method] if route.match.method else []


def _action(route: Route) -> str:
    action = route.action
    if isinstance(action, Forward):
        return "forward"
    if isinstance(action, Redirect):
        return f"redirect {action.status_code}"
    if isinstance(action, DirectResponse):
        return f"respond {action.status}"
    return type(action).__name__.lower()


def verdict(route: Route, pools: Mapping[str, Pool], now: Sample | None) -> tuple[str, str]:
    """(``ok`` | ``redirect`` | an HTTP status, why) for a request this route matches."""
    action = route.action
    if isinstance(action, Redirect):
        return "redirect", ""
    if isinstance(action, DirectResponse):
        if action.status >= 400:
            return str(action.status), f"the route answers {action.status} itself"
        return "ok", ""
    if not isinstance(action, Forward):
        return "ok", ""
    usable = []
    for backend in action.backends:
        if backend.pool is None:
            if backend.weight > 0:
                return str(backend.status), "a backend of this route does not resolve"
            continue
        pool = pools.get(backend.pool)
        if pool is not None and backend.weight > 0 and any(
                member_health(pool.name, m, now)[0] == "healthy" for m in pool.members):
            usable.append(pool.name)
    if not usable:
        return "503", "no pool of this route has a member that can take traffic"
    return "ok", ""


def request_url(ls: Listener, vh: VirtualHost, route: Route) -> str:
    """A URL a request this route matches could have (a wildcard host gets a sample label)."""
    scheme = "https" if ls.protocol is ListenerProtocol.HTTPS else "http"
    host = vh.hostname
    if host == "*":
        host = ls.address if ":" not in ls.address else f"[{ls.address}]"
    elif host.startswith("*."):
        host = "any" + host[1:]
    default = 443 if scheme == "https" else 80
    port = "" if ls.port == default else f":{ls.port}"
    path = route.match.path.value or "/"
    if not path.startswith("/"):  # a regex: its literal start is all we can offer
        path = "/"
    return f"{scheme}://{host}{port}{path}"


def member_health(pool: str, member: Member, now: Sample | None) -> tuple[str, str]:
    """(``healthy`` | ``unhealthy`` | ``draining``, why) from Kubernetes, then the engines
    (a local Envoy's admin and every engine's report: ``podway.readers.engine_health``)."""
    if member.state is MemberState.NOT_READY:
        return "unhealthy", "not ready in Kubernetes (EndpointSlice condition)"
    if member.state is MemberState.DRAINING:
        return "draining", "terminating: finishes in-flight requests, takes no new ones"
    seen: HostHealth | None = None
    if now is not None:
        seen = now.hosts.get((pool, f"{member.address}:{member.port}"))
    if seen is not None and not seen.healthy:
        return "unhealthy", seen.reason
    return "healthy", "ready; the engines agree" if seen is not None else "ready in Kubernetes"


def _pool(pool: Pool, ctx: _Context) -> dict[str, Any]:
    settings = pool.settings
    check = settings.health_check
    members = []
    for m in pool.members:
        health, why = member_health(pool.name, m, ctx.now)
        members.append({"address": m.address, "port": m.port, "weight": m.weight,
                        "state": str(m.state), "health": health, "why": why,
                        "origin": str(m.origin) if m.origin else "", "node": m.node or "",
                        "mode": _member_mode(m, ctx.options.mode)})
    return {
        "name": pool.name, "origin": str(pool.origin) if pool.origin else "",
        "protocol": str(settings.protocol), "lb_policy": str(settings.lb_policy),
        "health_check": None if check is None else _check_text(check),
        "members": members,
        "healthy": sum(1 for m in members if m["health"] == "healthy"),
        "traffic": ctx.figures("pools", pool.name),
    }


def _member_mode(member: Member, mode: str) -> str:
    """How traffic reaches this member: a Node origin is a NodePort hop, else the run's mode."""
    if member.origin is not None and member.origin.kind == "Node":
        return "nodeport"
    return mode


def _check_text(check: HealthCheck) -> str:
    what = {HealthCheckKind.HTTP: f"HTTP {check.http_path}",
            HealthCheckKind.GRPC: f"gRPC health {check.grpc_service or '(server)'}",
            HealthCheckKind.TCP: "TCP connect"}[check.kind]
    return f"{what} every {check.interval_ms} ms"
