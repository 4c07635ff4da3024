"""``podway status``: what a running instance serves, as terminal tables; ``--watch`` follows.

Reads a running instance's admin socket (``--instance``, ``--state-dir`` or ``--admin-socket``;
``GET /state`` and ``GET /health``): listeners, hosts and routes, pools,
members with readiness and the engine's live health, the engine's refusals (the last NACK of
each resource) and the objects with problems. ``tables`` is pure (state JSON in, renderables
out), so the dashboard and tests can reuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from podway.cli.commands.common import check_at_least, check_output, stdout_console
from podway.cli.commands.explain import InstanceOption, SocketOption, StateDirOption, live_socket


def register(app: typer.Typer) -> None:
    app.command()(status)


def status(
    admin_socket: SocketOption = None,
    instance: InstanceOption = "default",
    state_dir: StateDirOption = None,
    watch: Annotated[bool, typer.Option("--watch", help="Keep refreshing until Ctrl-C.")]
    = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")]
    = 2.0,
    output: Annotated[str | None, typer.Option(
        "-o", "--output", help="json: the instance's state and health as JSON (one document "
        "per refresh with --watch) instead of tables.")] = None,
) -> None:
    """Tables of listeners, hosts, routes, pools, members, health and the last NACKs."""
    check_at_least("--interval", interval, 0.2)
    as_json = check_output("-o", output) == "json"
    socket = live_socket(manifests=None, admin_socket=admin_socket, instance=instance,
                         state_dir=state_dir)
    assert socket is not None
    console = stdout_console()
    try:
        if not watch:
            if as_json or not console.is_terminal:
                view = asyncio.run(_fetch(socket, as_json=as_json))
            else:
                with console.status("asking the running instance…"):
                    view = asyncio.run(_fetch(socket, as_json=as_json))
            _emit(console, view)
            return
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the watch
            asyncio.run(_watch(socket, console, interval, as_json=as_json))
    except BrokenPipeError:  # `podway status --watch | head`: the reader had enough
        # Nothing more can go to a closed pipe, not even the flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


async def _fetch(socket: Path, *, as_json: bool = False) -> RenderableType | str:
    from podway.readers.admin_api import get_json

    state = await get_json(socket, "/state")
    health = await get_json(socket, "/health")
    if as_json:
        return json.dumps({"state": state, "health": health}, sort_keys=True)
    return tables(state, health["pools"] if health.get("known") else None)


def _emit(console: Console, view: RenderableType | str) -> None:
    """One answer on standard output, flushed at once (a pipe must see each refresh)."""
    if isinstance(view, str):
        sys.stdout.write(view + "\n")
    else:
        console.print(view)
    sys.stdout.flush()


async def _watch(socket: Path, console: Console, interval: float, *, as_json: bool) -> None:
    """Refresh in place on a terminal; piped (or with ``-o json``) print each refresh in turn,
    so ``| head``, ``| grep`` and a log file see them as they come."""
    from podway.readers.admin_api import AdminUnavailable

    live = console.is_terminal and not as_json
    with (Live(Text("asking the running instance…"), console=console, auto_refresh=False)
          if live else contextlib.nullcontext()) as screen:
        while True:
            try:
                view: RenderableType | str = await _fetch(socket, as_json=as_json)
            except AdminUnavailable as exc:  # a restart: keep watching
                view = (json.dumps({"error": f"{exc} (retrying)"}) if as_json
                        else Text(f"{exc} (retrying)", style="red"))
            if isinstance(screen, Live):
                stamp = Text(time.strftime("%H:%M:%S")
                             + f" — every {interval:g} s, Ctrl-C to stop", style="dim")
                assert not isinstance(view, str)
                screen.update(Group(stamp, view), refresh=True)
            elif isinstance(view, str):
                _emit(console, view)
            else:
                _emit(console, Group(Text(time.strftime("%H:%M:%S")), view))
            await asyncio.sleep(interval)


def tables(state: dict[str, Any], health: dict[str, dict[str, str]] | None) -> Group:
    """The status view of one ``GET /state`` answer (and ``/health``'s pools, if known)."""
    ir = state["ir"]
    parts: list[RenderableType] = [Text.from_markup(
        f"[bold]generation {state['generation']}[/bold] (version {state['version']}), "
        f"backend mode {escape(state.get('mode') or '?')}, "
        f"{len(ir.get('listeners') or ())} listeners, {len(ir.get('pools') or {})} pools; "
        f"engine health {'known' if health is not None else 'unknown (no engine)'}")]
    parts.append(_listeners(ir))
    parts.append(_routes(ir))
    parts.append(_pools(ir, health))
    rejections = state.get("rejections") or []
    if rejections:
        table = Table(title="engine refusals (last NACK per resource)", title_justify="left")
        for col in ("engine", "type", "resource", "message"):
            table.add_column(col, overflow="fold")
        for r in rejections:
            table.add_row(escape(r["node"]), r["type"], escape(r["resource"] or "(unnamed)"),
                          f"[red]{escape(r['message'])}[/red]")
        parts.append(table)
    else:
        parts.append(Text("engine refusals: none", style="green"))
    objects = (state.get("status") or {}).get("objects") or {}
    troubled = {name: entry for name, entry in objects.items() if entry.get("problems")}
    if troubled:
        table = Table(title="objects with problems", title_justify="left")
        for col in ("object", "accepted", "problems"):
            table.add_column(col, overflow="fold")
        for name, entry in troubled.items():
            table.add_row(escape(name), "yes" if entry.get("accepted") else "[red]no[/red]",
                          escape("; ".join(f"{p['reason']}: {p['message']}"
                                           for p in entry["problems"][:3])))
        parts.append(table)
    return Group(*parts)


def _listeners(ir: dict[str, Any]) -> Table:
    table = Table(title="listeners", title_justify="left")
    for col in ("listener", "protocol", "address", "hosts / routes", "TLS"):
        table.add_column(col, overflow="fold")
    for ls in ir.get("listeners") or ():
        address = ls["address"]
        where = f"[{address}]:{ls['port']}" if ":" in address else f"{address}:{ls['port']}"
        vhosts = ls.get("virtual_hosts") or []
        routes = sum(len(v.get("routes") or ()) for v in vhosts) + len(
            ls.get("l4_routes") or ())
        tls = {"HTTPS": f"terminated ({len(ls.get('certificates') or ())} certificates)",
               "TLS": "passthrough"}.get(ls["protocol"], "-")
        table.add_row(escape(ls["name"]), ls["protocol"], where,
                      f"{len(vhosts)} / {routes}", tls)
    return table


def _routes(ir: dict[str, Any]) -> Table:
    table = Table(title="hosts and routes, in precedence order", title_justify="left")
    for col in ("listener", "host", "route", "answer"):
        table.add_column(col, overflow="fold")
    for ls in ir.get("listeners") or ():
        for v in ls.get("virtual_hosts") or ():
            for r in v.get("routes") or ():
                table.add_row(escape(ls["name"]), escape(v["hostname"]), escape(r["name"]),
                              escape(_answer(r.get("action") or {})))
        for r in ls.get("l4_routes") or ():
            hosts = ", ".join(r.get("hostnames") or ()) or "*"
            table.add_row(escape(ls["name"]), escape(hosts), escape(r["name"]),
                          escape(_shares(r.get("backends") or [])))
    return table


def _answer(action: dict[str, Any]) -> str:
    kind = action.get("type")
    if kind == "DirectResponse":
        return f"answers {action.get('status')}"
    if kind == "Redirect":
        return f"redirect {action.get('status_code', 302)}"
    return _shares(action.get("backends") or [])


def _shares(shares: list[dict[str, Any]]) -> str:
    parts = []
    for s in shares:
        weight = f" (weight {s['weight']})" if s.get("weight", 1) != 1 else ""
        parts.append(f"{s['pool']}{weight}" if s.get("pool") else
                     f"answers {s.get('status', 500)}{weight}")
    return ", ".join(parts) or "-"


def _pools(ir: dict[str, Any], health: dict[str, dict[str, str]] | None) -> Table:
    table = Table(title="pools and members", title_justify="left")
    for col in ("pool", "member", "state", "engine health", "node", "pod / node"):
        table.add_column(col, overflow="fold")
    for name, pool in (ir.get("pools") or {}).items():
        members = pool.get("members") or []
        if not members:
            table.add_row(escape(name), "[red](no members)[/red]", "", "", "", "")
        live = (health or {}).get(name, {})
        for i, m in enumerate(members):
            where = (f"[{m['address']}]:{m['port']}" if ":" in m["address"]
                     else f"{m['address']}:{m['port']}")
            state = m.get("state", "ready")
            seen = live.get(where, "-" if health is None else "not listed")
            color = "green" if state == "ready" and seen in ("healthy", "-") else "red"
            table.add_row(escape(name) if i == 0 else "", where,
                          f"[{color}]{state}[/{color}]", escape(seen),
                          escape(m.get("node") or "-"), escape(m.get("origin") or "-"))
    return table
