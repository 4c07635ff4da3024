"""An explanation for a terminal (rich), drawn from its plain data (``Explanation.to_data``).

Working from the data, not the dataclasses, lets the command print an explanation computed here
(``--manifests``) and one a running instance sent over its admin endpoint the same way.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

_MARKS = {"ok": ("✔", "green"), "fail": ("✘", "red"), "info": ("•", "cyan")}


def report(data: dict[str, Any]) -> RenderableType:
    """Steps, candidate routes, pools with members, then the verdict and what to fix."""
    parts: list[RenderableType] = []
    q = data["query"]
    who = q["host"] or q["address"] or "?"
    at = f" at {q['address']}" if q["address"] and q["host"] else ""
    head = f"{q['method']} {q['scheme']}://{who}:{q['port']}{q['path']}{at}" if q["scheme"] in (
        "http", "https") else f"{q['scheme']}://{who}:{q['port']}{at}"
    extras = [f"SNI {q['sni']}"] if q["sni"] else []
    extras += [f"from {q['source_ip']}"] if q["source_ip"] else []
    extras += [f"{k}: {v}" for k, v in q["headers"].items()]
    parts.append(Text.from_markup(f"[bold]{escape(head)}[/bold]" + (
        f"  ({escape(', '.join(extras))})" if extras else "")))
    steps = Table(show_header=False, box=None, pad_edge=False)
    steps.add_column(width=2)
    steps.add_column(style="bold", no_wrap=True)
    steps.add_column(overflow="fold")
    for s in data["steps"]:
        sign, color = _MARKS.get(s["mark"], ("?", "white"))
        steps.add_row(f"[{color}]{sign}[/{color}]", s["stage"].replace("_", " "),
                      escape(s["text"]))
    parts.append(steps)
    if data["routes"]:
        parts.append(_routes(data["routes"], data.get("virtual_host") or ""))
    for pool in data["pools"]:
        parts.append(_pool(pool))
    parts.append(_verdict(data["verdict"]))
    for note in data.get("notes") or ():  # e.g. no engine known: readiness only
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)


def _routes(routes: list[dict[str, Any]], vhost: str) -> Table:
    table = Table(title=f"routes of {vhost}, in precedence order", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("route", overflow="fold")
    table.add_column("match")
    table.add_column("result", overflow="fold")
    for i, r in enumerate(routes, 1):
        color = "green" if r["chosen"] else "yellow" if r["matched"] else "dim"
        table.add_row(str(i), escape(f"{r['name']}\n({r['origin']})"), escape(r["match"]),
                      f"[{color}]{escape(r['why'])}[/{color}]")
    return table


def _pool(pool: dict[str, Any]) -> RenderableType:
    title = f"pool {pool['name']} ({pool['percent']:g} %)"
    if not pool["exists"]:
        return Text(f"{title}: not configured", style="red")
    title += f": {pool['mode'] or 'mode unknown'}, {pool['protocol']}, {pool['lb_policy']}"
    if pool["origin"]:
        title += f", from {pool['origin']}"
    table = Table(title=title, title_justify="left")
    for col in ("member", "state", "engine health", "node", "pod/node", "takes requests"):
        table.add_column(col, overflow="fold")
    if not pool["members"]:
        table.add_row("[red](no members)[/red]", "", "", "", "", "")
    for m in pool["members"]:
        hostport = (f"[{m['address']}]:{m['port']}" if ":" in m["address"]
                    else f"{m['address']}:{m['port']}")
        color = "green" if m["receives"] else "red"
        table.add_row(hostport, m["state"], m["health"] or "-", m["node"] or "-",
                      m["origin"] or "-", f"[{color}]{escape(m['why'])}[/{color}]")
    return table


def _verdict(verdict: dict[str, Any]) -> RenderableType:
    classes = {o["status_class"] for o in verdict["outcomes"]}
    color = "green" if classes <= {"2xx", "3xx"} else "red"
    parts: list[RenderableType] = [
        Text.from_markup(f"[bold {color}]verdict:[/bold {color}] {escape(verdict['summary'])}")]
    if verdict["fix"]:
        parts.append(Text.from_markup("[bold]look at:[/bold] " + escape(", ".join(
            verdict["fix"]))))
    for p in verdict["problems"]:
        pc = {"error": "red", "warning": "yellow"}.get(p["severity"], "cyan")
        at = f" ({p['field']})" if p["field"] else ""
        parts.append(Text.from_markup(
            f"  [{pc}]{p['severity']}[/{pc}] {escape(p['object'])} {escape(p['reason'])}: "
            f"{escape(p['message'])}{escape(at)}"))
    return Group(*parts)


def report_text(data: dict[str, Any], *, width: int = 100) -> str:
    """The same report as plain text (no colour codes), e.g. for a web page."""
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(report(data))
    return console.export_text()

