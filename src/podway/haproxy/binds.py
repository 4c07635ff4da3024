"""Listeners HAProxy could not bind, read from its log (pure).

A reload whose configuration binds a port another program holds fails as a whole: the master
logs an ``[ALERT]`` per frontend it could not bind, then "Loading failure!", and the workers
of the last good configuration go on serving it. Podway reads those lines (from the log's
offset before the reload) to report each such listener as the engine's refusal, on the object
that declared it, as Envoy's refusal of a listener is reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_BIND = re.compile(r"for frontend (?P<fe>\S+): cannot bind socket \((?P<why>[^)]*)\)"
                   r"(?: for \[(?P<where>[^\]]*)\])?")
LOADING_FAILED = "Loading failure!"


def bind_failures(lines: Iterable[str], frontends: Mapping[str, str]
                  ) -> tuple[tuple[str, str], ...]:
    """(IR listener name, reason) of each frontend the log says could not bind; ``frontends``
    maps HAProxy's frontend names to the IR listeners they serve."""
    out: dict[str, str] = {}
    for line in lines:
        found = _BIND.search(line)
        if found is None or found.group("fe") not in frontends:
            continue
        where = f" on {found.group('where')}" if found.group("where") else ""
        out.setdefault(frontends[found.group("fe")],
                       f"haproxy could not bind its port{where}: cannot bind socket "
                       f"({found.group('why')}); is another engine or program listening "
                       "there?")
    return tuple(sorted(out.items()))
