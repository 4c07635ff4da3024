"""What the engine says: request counters, latency quantiles and member health, from Envoy's admin.

``sample`` makes one or two admin requests — ``/stats?format=json`` filtered to the few request
stats the dashboard shows, and, only when asked (some pool has an active health check: else
Envoy knows no more of a member's health than the IR's readiness), ``/clusters?format=json`` for
each member's health flags — and returns a frozen ``Sample``. Parsing runs in a worker thread:
at 4,000 pools the clusters answer is ~5 MB. Everything else here is pure: parsing those
answers, and ``rates`` between two samples. The cost is bounded by the caller (one sample per
refresh interval, only while someone watches) and by the bootstrap (per-pool stats exist only
with ``--envoy-stats detailed``; without them the figures are per listener).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

from podway.envoy.engine import admin

# The request stats shown: per listener (HTTP connection manager) and per pool (cluster).
_COUNTERS = ("downstream_rq_total", "downstream_rq_4xx", "downstream_rq_5xx",
             "upstream_rq_total", "upstream_rq_4xx", "upstream_rq_5xx")
_HISTOGRAMS = ("downstream_rq_time", "upstream_rq_time")
STATS_FILTER = (r"^(http|cluster)\..+\.(" + "|".join(_COUNTERS + _HISTOGRAMS) + ")$")
_NAME = re.compile(r"^(http|cluster)\.(.+)\.(\w+)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """Counters of one listener or pool at one instant; latency quantiles in milliseconds."""

    total: int = 0
    errors_4xx: int = 0
    errors_5xx: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HostHealth:
    """Envoy's view of one member: ``healthy``, or why not."""

    healthy: bool
    reason: str = ""  # "failed active health check", "ejected (outlier)", "EDS: UNHEALTHY", …


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One look at the engine. ``listeners`` keyed by HTTP stat prefix, ``pools`` by cluster
    name, ``hosts`` by (cluster, "address:port")."""

    taken_at: float  # monotonic seconds
    listeners: Mapping[str, Figures] = field(default_factory=lambda: MappingProxyType({}))
    pools: Mapping[str, Figures] = field(default_factory=lambda: MappingProxyType({}))
    hosts: Mapping[tuple[str, str], HostHealth] = field(
        default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True, kw_only=True)
class Rates:
    """Per second between two samples; ``error_ratio`` of 5xx over all (None: no requests)."""

    rps: float
    error_ratio: float | None
    p99_ms: float | None


async def sample(address: str, *, now: float, health: bool = True,
                 limit_s: float = 2.0) -> Sample:
    """Ask the engine at ``address`` (raises OSError/TimeoutError when it does not answer);
    member health only with ``health``."""
    path = f"/stats?format=json&filter={quote(STATS_FILTER, safe='')}"
    _, stats_body = await admin.request(address, path, limit_s=limit_s)
    listeners, pools = await asyncio.to_thread(parse_stats, stats_body)
    hosts: Mapping[tuple[str, str], HostHealth] = MappingProxyType({})
    if health:
        _, clusters_body = await admin.request(address, "/clusters?format=json",
                                               limit_s=limit_s)
        hosts = await asyncio.to_thread(parse_clusters, clusters_body)
    return Sample(taken_at=now, listeners=listeners, pools=pools, hosts=hosts)


def parse_stats(body: str) -> tuple[Mapping[str, Figures], Mapping[str, Figures]]:
    """Envoy's JSON stats → (per listener prefix, per cluster) figures; junk gives nothing."""
    try:
        data = json.loads(body)
    except ValueError:
        return MappingProxyType({}), MappingProxyType({})
    values: dict[tuple[str, str], dict[str, float | None]] = {}
    entries = data.get("stats", []) if isinstance(data, dict) else []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        if "name" in entry and isinstance(entry.get("value"), int):
            _put(values, entry["name"], "value", float(entry["value"]))
        histograms = entry.get("histograms")
        if isinstance(histograms, dict):
            _quantiles(values, histograms)
    listeners: dict[str, Figures] = {}
    pools: dict[str, Figures] = {}
    for (family, owner), found in values.items():
        side = "downstream" if family == "http" else "upstream"
        figures = Figures(total=int(found.get(f"{side}_rq_total") or 0),
                          errors_4xx=int(found.get(f"{side}_rq_4xx") or 0),
                          errors_5xx=int(found.get(f"{side}_rq_5xx") or 0),
                          p50_ms=found.get(f"{side}_rq_time.p50"),
                          p99_ms=found.get(f"{side}_rq_time.p99"))
        (listeners if family == "http" else pools)[owner] = figures
    return MappingProxyType(listeners), MappingProxyType(pools)


def _put(values: dict[tuple[str, str], dict[str, float | None]], name: object, key: str,
         value: float | None) -> None:
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        return
    family, owner, stat = match.groups()
    values.setdefault((family, owner), {})[stat if key == "value" else f"{stat}.{key}"] = value


def _quantiles(values: dict[tuple[str, str], dict[str, float | None]],
               histograms: dict[str, Any]) -> None:
    supported = histograms.get("supported_quantiles")
    computed = histograms.get("computed_quantiles")
    if not isinstance(supported, list) or not isinstance(computed, list):
        return
    wanted = {"p50": 50.0, "p99": 99.0}
    for histogram in computed:
        if not isinstance(histogram, dict) or not isinstance(histogram.get("values"), list):
            continue
        for label, q in wanted.items():
            if q not in supported:
                continue
            point = histogram["values"][supported.index(q)]
            if not isinstance(point, dict):
                continue
            # The last interval when it saw requests, else everything since Envoy started.
            value = point.get("interval")
            if not isinstance(value, int | float):
                value = point.get("cumulative")
            if isinstance(value, int | float):
                _put(values, histogram.get("name"), label, float(value))


def parse_clusters(body: str) -> Mapping[tuple[str, str], HostHealth]:
    """Envoy's ``/clusters?format=json`` → health per (cluster, "address:port")."""
    try:
        data = json.loads(body)
    except ValueError:
        return MappingProxyType({})
    out: dict[tuple[str, str], HostHealth] = {}
    clusters = data.get("cluster_statuses", []) if isinstance(data, dict) else []
    for cluster in clusters if isinstance(clusters, list) else []:
        if not isinstance(cluster, dict) or not isinstance(cluster.get("host_statuses"), list):
            continue
        for host in cluster["host_statuses"]:
            socket = (host.get("address") or {}).get("socket_address") if isinstance(
                host, dict) else None
            if not isinstance(socket, dict):
                continue
            key = (str(cluster.get("name", "")),
                   f"{socket.get('address', '')}:{socket.get('port_value', 0)}")
            out[key] = host_health(host.get("health_status") or {})
    return MappingProxyType(out)


def host_health(flags: Mapping[str, Any]) -> HostHealth:
    """One host's ``health_status`` object → healthy, or the first reason it is not."""
    if flags.get("failed_active_health_check"):
        return HostHealth(healthy=False, reason="failed active health check")
    if flags.get("failed_outlier_check"):
        return HostHealth(healthy=False, reason="ejected (outlier detection)")
    if flags.get("failed_active_degraded_check"):
        return HostHealth(healthy=False, reason="degraded (active health check)")
    if flags.get("pending_active_hc"):
        return HostHealth(healthy=False, reason="waiting for its first health check")
    eds = flags.get("eds_health_status", "HEALTHY")
    if eds not in ("HEALTHY", "UNKNOWN", None):
        return HostHealth(healthy=False, reason=f"EDS: {eds}")
    return HostHealth(healthy=True)


def rates(before: Figures | None, after: Figures | None, seconds: float) -> Rates | None:
    """Requests per second and 5xx ratio between two readings (None: nothing to compare)."""
    if before is None or after is None or seconds <= 0:
        return None
    requests = after.total - before.total
    if requests < 0:  # Envoy restarted: its counters began again
        return None
    errors = max(0, after.errors_5xx - before.errors_5xx)
    return Rates(rps=requests / seconds,
                 error_ratio=(errors / requests) if requests else None,
                 p99_ms=after.p99_ms)
