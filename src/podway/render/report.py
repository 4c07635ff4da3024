"""Plain-data report of one translation: load errors, problems per object, and the IR.

The golden translation tests compare exactly this, and standalone mode's status file is built
from the same pieces, so what a user reads and what the tests pin down cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from podway.ir.dump import dump_yaml, to_data
from podway.model.loader import LoadError
from podway.translate import Result


def problems_data(result: Result) -> dict[str, list[dict[str, str]]]:
    """Problems grouped by object (``Kind/ns/name``), in stable order."""
    out: dict[str, list[dict[str, str]]] = {}
    for ref, problems in sorted(result.problems_by_object().items()):
        out[str(ref)] = [
            {k: v for k, v in (("severity", str(p.severity)), ("reason", str(p.reason)),
                               ("message", p.message), ("field", p.field)) if v}
            for p in problems]
    return out


def report_data(result: Result, load_errors: Iterable[LoadError] = ()) -> dict[str, Any]:
    data: dict[str, Any] = {}
    errors = [str(e) for e in load_errors]
    if errors:
        data["load_errors"] = errors
    data["problems"] = problems_data(result)
    data["ir"] = {"listeners": to_data(result.ir.listeners),
                  "pools": [to_data(result.ir.pools[n]) for n in sorted(result.ir.pools)]}
    return data


def report_yaml(result: Result, load_errors: Iterable[LoadError] = ()) -> str:
    return dump_yaml(report_data(result, load_errors))
