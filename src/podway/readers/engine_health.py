"""Every engine's member health, as explain and the dashboard show it.

Each engine reads its own data plane's view of its members (Envoy: admin ``/clusters``;
HAProxy: ``show stat``; the kernel engine: its own checks) as one ``View`` (pool,
"address:port") → healthy / pending / unhealthy with a reason (``podway.engines.reporter``).
The surfaces take those views by engine node (``EngineViews``): a controller passes what its
engines reported over the member-health stream (``reported``: remote Envoy, HAProxy and kernel
engines alike), ``podway run`` the views of the engines it supervises. This module turns them
into explain's ``Health`` and the dashboard's host health, one rule for all:

* a member is healthy when every engine that reports it finds it healthy;
* otherwise the text names each engine that does not, with its reason
  (``hap-1: failed active health check``), so the reader sees which engine and why;
* a member no engine reports is left out (explain and the dashboard then say the engine does not
  know it), never guessed healthy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType

from podway.engines.member_health import Health, HostKey, HostState, MemberHealthReports

View = Mapping[HostKey, HostState]
EngineViews = Callable[[], Awaitable[Mapping[str, View]]]  # engine node → its view now


def reported(reports: MemberHealthReports) -> EngineViews:
    """The views the engines last reported to this controller (those with a stream open)."""

    async def views() -> Mapping[str, View]:
        found = {}
        for node in sorted(reports.nodes):
            view = reports.view(node)
            if view is not None:
                found[node] = view
        return MappingProxyType(found)

    return views


def _why(node: str, state: HostState) -> str:
    reason = state.reason or ("not checked yet" if state.health is Health.PENDING
                              else str(state.health))
    return f"{node}: {reason}"


def member_texts(views: Mapping[str, View]) -> dict[HostKey, str]:
    """(pool, "address:port") → ``healthy``, or each engine's reason it is not, joined by
    ``; `` (engines in name order)."""
    unhealthy: dict[HostKey, list[str]] = {}
    seen: set[HostKey] = set()
    for node in sorted(views):
        for key, state in views[node].items():
            seen.add(key)
            if state.health is not Health.HEALTHY:
                unhealthy.setdefault(key, []).append(_why(node, state))
    return {key: "; ".join(unhealthy[key]) if key in unhealthy else "healthy" for key in seen}


def explain_health(views: Mapping[str, View],
                   also: Mapping[str, Mapping[str, str]] | None = None
                   ) -> dict[str, dict[str, str]]:
    """Explain's ``Health`` (pool → "address:port" → ``healthy`` or why not) from the engines'
    views, on top of ``also`` (a local Envoy's admin flags): a member one source finds
    unhealthy is unhealthy, with every reason."""
    out = {pool: dict(hosts) for pool, hosts in (also or {}).items()}
    for (pool, hostport), text in member_texts(views).items():
        before = out.setdefault(pool, {}).get(hostport)
        if before is None or before == "healthy":
            out[pool][hostport] = text
        elif text != "healthy":
            out[pool][hostport] = f"{before}; {text}"
    return out
