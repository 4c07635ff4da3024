"""Member health as HAProxy sees it, in the engine-neutral form every engine reports.

``show stat`` on the runtime socket gives each server slot's status and last check; the
rendering (``Rendered.slots``) says which member sits in which slot, so the view is keyed
exactly as the Envoy engine keys it: (pool name, "address:port"), IPv6 without brackets. The
reasons are the Envoy engine's words (``podway.envoy.engine.health_report.classify``), so the
readiness gate, status and dashboard read both engines alike. Empty slots are not members and
are left out. Fallback members sit in backup slots (``b1``...) and are reported as the others.

Mapping: a member whose check never ran (``INI``) is pending, whatever HAProxy counts it
meanwhile; ``no check`` and ``UP`` (also ``UP n/m`` going down, ``DRAIN``, ``NOLB``) are
healthy; ``DOWN`` is unhealthy ("failed active health check", "(timeout)" for a check that
timed out).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Collection, Mapping
from types import MappingProxyType

from podway.engines.member_health import Health, HostKey, HostState
from podway.haproxy.backends import backend_name
from podway.haproxy.render import Rendered
from podway.haproxy.slots import slot_name

View = Mapping[HostKey, HostState]


def parse_stat(text: str) -> dict[tuple[str, str], tuple[str, str]]:
    """``show stat`` CSV → (proxy, server) → (status, check_status)."""
    lines = text.lstrip("# ").splitlines()
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        proxy, server = row.get("pxname") or "", row.get("svname") or ""
        if server in ("FRONTEND", "BACKEND") or not proxy:
            continue
        out[(proxy, server)] = (row.get("status") or "", row.get("check_status") or "")
    return out


def classify(status: str, check: str) -> HostState | None:
    """One slot's status → its health; None for an empty slot (maintenance)."""
    if status.startswith("MAINT"):
        return None
    if status == "no check":
        return HostState(Health.HEALTHY)
    if check in ("", "INI", "UNK"):  # HAProxy counts it up meanwhile; nothing was measured
        return HostState(Health.PENDING, "waiting for its first health check")
    if status.startswith(("UP", "DRAIN", "NOLB")):
        return HostState(Health.HEALTHY)
    why = " (timeout)" if check.endswith("TOUT") else ""
    return HostState(Health.UNHEALTHY, f"failed active health check{why}")


def view(rendered: Rendered, stats: Mapping[tuple[str, str], tuple[str, str]],
         only: Collection[str] | None = None) -> View:
    """Every member's health; ``only``: the members of these pools alone."""
    out: dict[HostKey, HostState] = {}
    pools = rendered.slots.keys() if only is None else [p for p in only if p in rendered.slots]
    placed = [(pool, rendered.slots[pool], False) for pool in pools]
    placed += [(pool, rendered.backups[pool], True) for pool in pools if pool in rendered.backups]
    for pool, slots, backup in placed:
        backend = backend_name(pool)
        for i, member in enumerate(slots):
            if member is None:
                continue
            found = stats.get((backend, slot_name(i, backup=backup)))
            state = classify(*found) if found else None
            if state is not None:
                out[(pool, f"{member[0]}:{member[1]}")] = state
    return MappingProxyType(out)


def unproven(rendered: Rendered, seen: View) -> dict[str, frozenset[str]]:
    """Backend → the checked, enabled slots of ``rendered`` whose member is not up in ``seen``
    (what the running HAProxy counts; a member it does not have is not up either), for pools
    that keep a member up: a reload to ``rendered`` must not count those up before a check
    passed, and the pool's proven members serve meanwhile. A pool with none up (a new one,
    or every member down) is left to HAProxy's own start: every server up until a check
    fails."""
    out: dict[str, frozenset[str]] = {}
    for pool, slots in rendered.slots.items():
        backend = backend_name(pool)
        states = {state.name: state for state in rendered.servers.get(backend, ())}
        names: set[str] = set()
        proven = False
        placed = [(slot_name(i), m) for i, m in enumerate(slots)]
        placed += [(slot_name(i, backup=True), m)
                   for i, m in enumerate(rendered.backups.get(pool, ()))]
        for name, member in placed:
            state = states.get(name)
            if member is None or state is None or not state.checked or state.state != "ready":
                continue
            now = seen.get((pool, f"{member[0]}:{member[1]}"))
            if now is not None and now.health is Health.HEALTHY:
                proven = proven or state.weight > 0
            else:
                names.add(name)
        if names and proven:
            out[backend] = frozenset(names)
    return out
