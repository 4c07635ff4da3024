"""The "what would be served" table: listener → host → match → action → members."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from podway.ir import (
    IR,
    DirectResponse,
    Forward,
    Listener,
    Member,
    MemberState,
    Redirect,
    Route,
    RouteMatch,
)
from podway.ir import ListenerProtocol as Protocol
from podway.ir.route import PathKind


def served_table(ir: IR) -> Table:
    table = Table(title="What would be served", title_justify="left")
    # Addresses are never wrapped (they must stay copyable; one member per line); the other
    # columns fold instead.
    table.add_column("listener", no_wrap=True, min_width=max(
        (len(_where(listener)) for listener in ir.listeners), default=8))
    for column in ("host", "match", "action"):
        table.add_column(column, overflow="fold")
    table.add_column("members", no_wrap=True, min_width=max(
        (len(_member(m)) for pool in ir.pools.values() for m in pool.members), default=7))
    for listener in ir.listeners:
        where = _where(listener)
        for vhost in listener.virtual_hosts:
            for route in vhost.routes:
                action, members = _action(route, ir)
                _row(table, where, vhost.hostname, _match(route.match), action, members)
                where = ""
        for l4 in listener.l4_routes:
            pools = [wp.pool or f"→ {wp.status}" for wp in l4.backends]
            how = ("(TLS terminated)" if l4.certificate is not None
                   else "(TLS passthrough)" if listener.protocol in (Protocol.TLS, Protocol.HTTPS)
                   else "(any)")
            _row(table, where, ", ".join(l4.hostnames) or "*", how, ", ".join(pools),
                          "\n".join(_members(ir, wp.pool) for wp in l4.backends))
            where = ""
    return table


def _where(listener: Listener) -> str:
    host = f"[{listener.address}]" if ":" in listener.address else listener.address
    return f"{listener.protocol} {host}:{listener.port}"


def _row(table: Table, *cells: str) -> None:
    """Cells are user text (paths, regexes, hosts): never parsed as rich markup."""
    table.add_row(*(Text(cell) for cell in cells))


def _match(match: RouteMatch) -> str:
    path = match.path
    text = {PathKind.EXACT: "= ", PathKind.PREFIX: "", PathKind.REGEX: "~ "}[path.kind] + path.value
    extra = [f"{h.name}: {h.value}" for h in match.headers]
    extra += [f"?{q.name}={q.value}" for q in match.query]
    if match.method:
        extra.insert(0, match.method)
    return " ".join([text, *extra])


def _action(route: Route, ir: IR) -> tuple[str, str]:
    action = route.action
    if isinstance(action, Forward):
        names = [f"{wp.pool}" + (f" ({wp.weight})" if len(action.backends) > 1 else "")
                 if wp.pool else f"→ {wp.status}" for wp in action.backends]
        return "\n".join(names), "\n".join(_members(ir, wp.pool) for wp in action.backends)
    if isinstance(action, Redirect):
        return f"redirect {action.status_code}", ""
    assert isinstance(action, DirectResponse)
    return f"respond {action.status}", ""


def _members(ir: IR, pool_name: str | None) -> str:
    pool = ir.pools.get(pool_name) if pool_name else None
    if pool is None:
        return "-"
    if not pool.members:
        return "(none)"
    return "\n".join(_member(m) for m in pool.members)


_MARKS = {MemberState.READY: "", MemberState.NOT_READY: " (not ready)",
          MemberState.DRAINING: " (draining)"}


def _member(member: Member) -> str:
    host = f"[{member.address}]" if ":" in member.address else member.address
    return f"{host}:{member.port}{_MARKS[member.state]}"
