"""Work a sub-command starts before its own modules are imported.

``podway run --manifests DIR`` parses its folder's big files in a second process
(``podway.sources.prefetch``), and that process is on a cold start's critical path: at 10,000
routes it parsed until after the main process had imported everything (docs/performance.md,
"Cold start: the parse starts with the process"). Started from ``run`` itself it began only
after typer and the command's modules were imported (0.35-0.4 s in); ``start`` begins it from
the bare command line, before any of them.

This is only a head start: ``taken`` hands the process to ``run`` when ``run`` is given the same
folder; anything else (an unusual command line, a folder typer then refuses) leaves ``run`` to
start its own, and a process nobody takes dies with Podway (parent-death signal).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from podway.sources.prefetch import Prefetch

_OPTION = "--manifests"
_started: list[Prefetch] = []


def start(argv: Sequence[str]) -> None:
    """The prefetch process of ``podway run``'s folder, if ``argv`` (the command line after the
    program name) is a ``run`` that names one."""
    if not argv or argv[0] != "run":
        return
    root = manifests_of(argv[1:])
    if root is None or not os.path.isdir(root):
        return
    from podway.sources.prefetch import Prefetch

    _started.append(Prefetch(Path(root)))


def manifests_of(args: Sequence[str]) -> str | None:
    """The value of the last ``--manifests`` (``--manifests DIR`` or ``--manifests=DIR``)
    before a ``--``, as click reads it; None when there is none."""
    found: str | None = None
    at = 0
    while at < len(args):
        arg = args[at]
        if arg == "--":
            break
        if arg == _OPTION and at + 1 < len(args):
            found, at = args[at + 1], at + 2
            continue
        if arg.startswith(_OPTION + "="):
            found = arg[len(_OPTION) + 1:]
        at += 1
    return found


def taken(root: Path) -> Prefetch | None:
    """The process ``start`` began for ``root`` (then no longer held here), else None; one
    begun for another folder is stopped."""
    out = None
    while _started:
        prefetch = _started.pop()
        if out is None and os.path.abspath(prefetch.root) == os.path.abspath(root):
            out = prefetch
        else:
            prefetch.close()
    return out
