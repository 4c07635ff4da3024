"""Object statuses for people: one row per object (and per Gateway listener / route parent).

The full status document (``podway.status``) goes to ``--status-file``; this table is the
summary ``podway validate`` prints: "ok" when every condition is healthy, else
each unhealthy condition as ``Type=Status(Reason): message`` in red.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.table import Table
from rich.text import Text

from podway.model import ObjectRef
from podway.status import ObjectEntry
from podway.translate.core.status import Condition, ObjectStatus


def _conditions(conditions: tuple[Condition, ...]) -> Text:
    """Styled text built from pieces, so a message is never read as markup."""
    out = Text()
    for c in conditions:
        # Conflicted and PartiallyInvalid are negative-polarity: True is the bad value.
        if c.status is (c.type not in ("Conflicted", "PartiallyInvalid")):
            continue
        value = "Unknown" if c.status is None else c.status
        if out:
            out.append("\n")
        out.append(f"{c.type}={value}({c.reason})", style="red")
        out.append(f": {c.message}")
    return out or Text("ok", style="green")


def status_table(statuses: Mapping[ObjectRef, ObjectStatus]) -> Table:
    table = Table(title="Status", title_justify="left")
    for column in ("object", "part", "conditions"):
        table.add_column(column, overflow="fold")
    for ref in sorted(statuses):
        status = statuses[ref]
        name = str(ref)
        if status.conditions:
            _row(table, name, "", _conditions(status.conditions))
            name = ""
        for ls in status.listeners:
            _row(table, name, f"listener {ls.name} ({ls.attached_routes} routes)",
                          _conditions(ls.conditions))
            name = ""
        for parent in status.parents:
            p = parent.parent_ref
            part = f"{p.kind} {p.namespace}/{p.name}" + (
                f" {p.section_name}" if p.section_name else "") + (
                f" :{p.port}" if p.port else "")
            _row(table, name, part, _conditions(parent.conditions))
            name = ""
    return table


def not_owned_table(entries: Iterable[ObjectEntry]) -> Table:
    """Objects Podway leaves to others (another class, …), each with the reason."""
    table = Table(title="Not Podway's (left alone)", title_justify="left")
    for column in ("object", "why"):
        table.add_column(column, overflow="fold")
    for entry in sorted(entries, key=lambda e: e.ref):
        _row(table, str(entry.ref), entry.not_owned_reason)
    return table


def _row(table: Table, *cells: str | Text) -> None:
    """Plain cells are user text (names, messages): never parsed as rich markup."""
    table.add_row(*(cell if isinstance(cell, Text) else Text(cell) for cell in cells))
