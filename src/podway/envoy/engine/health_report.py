"""The Envoy engine's member health: what its Envoy thinks of each member.

``podway engine`` runs a ``Reporter`` beside Envoy: the shared reporter of every engine
(``podway.engines.reporter``: streams to every controller replica, full view first, changes
after, parts under gRPC's bound, keepalive), reading Envoy's admin ``/clusters`` once every
``interval_s`` (the health flags of every host of every pool) and reducing each host to
healthy / pending / unhealthy (``classify``).

Invariants:

* The Kubernetes readiness Envoy was told (EDS health status) is ignored: the gate itself moves
  it, so counting it would lock a gated pod out for good. Health is what Envoy measured.
* Envoy's admin not answering keeps the last view (Envoy restarting is seen as its hosts
  turning pending once it answers again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from podway.engines import reporter as engine_reporter
from podway.engines.member_health import Health, HostKey, HostState, Refusal
from podway.engines.report_targets import Resolver, resolve
from podway.engines.reporter import ReportOptions
from podway.envoy.engine import admin

__all__ = ["ReportOptions", "Reporter", "classify", "parse", "read_view"]

log = logging.getLogger(__name__)

View = Mapping[HostKey, HostState]


# Envoy's text ``/clusters`` flag names → the JSON names ``classify`` reads.
_FLAGS = {"failed_active_hc": "failed_active_health_check",
          "failed_outlier_check": "failed_outlier_check",
          "degraded_active_hc": "failed_active_degraded_check",
          "pending_active_hc": "pending_active_hc",
          "excluded_via_immediate_hc_fail": "excluded_via_immediate_hc_fail",
          "active_hc_timeout": "active_hc_timeout"}
_MARK = "::health_flags::"


def classify(flags: Mapping[str, Any]) -> HostState:
    """One host's health flags (named as in the JSON ``/clusters``' ``health_status``) →
    its health. EDS status, the Kubernetes readiness Podway itself sent, is ignored: see the
    module docstring."""
    if flags.get("pending_active_hc"):
        return HostState(Health.PENDING, "waiting for its first health check")
    if flags.get("failed_active_health_check"):
        why = " (timeout)" if flags.get("active_hc_timeout") else ""
        return HostState(Health.UNHEALTHY, f"failed active health check{why}")
    if flags.get("failed_outlier_check"):
        return HostState(Health.UNHEALTHY, "ejected by outlier detection")
    if flags.get("excluded_via_immediate_hc_fail"):
        return HostState(Health.UNHEALTHY, "answered an immediate health check failure")
    return HostState(Health.HEALTHY)


def parse(body: str) -> View:
    """Envoy's text ``/clusters`` → (pool, "address:port") → health; other lines are skipped.

    Only the ``<cluster>::<host>::health_flags::<flags>`` lines matter (``healthy``, or flags
    like ``/failed_active_hc/pending_active_hc``), so they are found by substring search
    instead of parsing the whole answer: ``json.loads`` of the JSON form costs ~4x more per
    look at 4,000 pools (``bench/health_report.py``). An IPv6 host
    ``[a::b]:port`` becomes ``a::b:port``, as the controller names members.
    """
    out: dict[HostKey, HostState] = {}
    at = body.find(_MARK)
    while at >= 0:
        line_start = body.rfind("\n", 0, at) + 1
        line_end = body.find("\n", at)
        line_end = len(body) if line_end < 0 else line_end
        cluster, sep, host = body[line_start:at].partition("::")
        if sep and host:
            if host.startswith("["):
                address, _, port = host[1:].partition("]:")
                host = f"{address}:{port}"
            names = body[at + len(_MARK):line_end].strip().split("/")
            out[(cluster, host)] = classify({_FLAGS[n]: True for n in names if n in _FLAGS})
        at = body.find(_MARK, line_end)
    return MappingProxyType(out)


async def read_view(address: str, *, limit_s: float = 5.0) -> View | None:
    """The engine's view now; None when its admin does not answer well."""
    try:
        status, body = await admin.request(address, "/clusters", limit_s=limit_s)
    except (OSError, TimeoutError):
        return None
    if status != 200:
        return None
    return await asyncio.to_thread(parse, body)  # megabytes with thousands of pools


class Reporter(engine_reporter.Reporter):
    """The shared reporter (``podway.engines.reporter``) reading Envoy's admin at
    ``admin_address()`` (None: not known yet, nothing read)."""

    def __init__(self, opts: ReportOptions, admin_address: Callable[[], str | None], *,
                 resolver: Resolver = resolve,
                 refused: Callable[[], tuple[Refusal, ...]] = tuple) -> None:
        self.admin_address = admin_address
        super().__init__(opts, self._read, resolver=resolver, refused=refused)

    async def _read(self) -> View | None:
        address = self.admin_address()
        return await read_view(address) if address is not None else None
