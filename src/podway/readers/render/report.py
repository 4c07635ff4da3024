"""Plain-data report of one translation: the status document plus the IR.

The golden translation tests compare exactly this. Its status part is the one status document
(``podway.status``) that ``run``/``validate --status-file`` write, so what a user reads and what
the tests pin down cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from podway.ir.dump import dump_yaml, to_data
from podway.model import Snapshot
from podway.model.loader import LoadError
from podway.status import build
from podway.translate import Result


def report_data(result: Result, load_errors: Iterable[LoadError] = (), *,
                snapshot: Snapshot | None = None) -> dict[str, Any]:
    """The status document of ``result`` (every object of ``snapshot``) and its IR."""
    document = build(snapshot=snapshot or Snapshot(), result=result, load_errors=load_errors)
    data = document.to_data()
    for empty in ("load_errors", "load_warnings", "stale_files", "engine_rejections"):
        if not data[empty]:
            del data[empty]  # never set by a translation alone; keep the goldens short
    data["ir"] = {"listeners": to_data(result.ir.listeners),
                  "pools": [to_data(result.ir.pools[n]) for n in sorted(result.ir.pools)]}
    return data


def report_yaml(result: Result, load_errors: Iterable[LoadError] = (), *,
                snapshot: Snapshot | None = None) -> str:
    return dump_yaml(report_data(result, load_errors, snapshot=snapshot))
