"""Regular expressions as the engine runs them: RE2, with Envoy's program-size limit.

Python's ``re`` accepts lookarounds, backreferences and atomic groups that RE2 does not, and
Envoy refuses (NACKs) a whole route table over one pattern whose compiled program exceeds its
size limit. Checking here turns that into a problem on the one object that wrote the pattern.

RE2 is imported at the first pattern to check (``options``): a cluster with no regex never
loads it (~1 MiB of resident memory in the controller).
"""

from __future__ import annotations

import functools
from typing import Any

# Envoy's default ``re2.max_program_size.error_level``: larger programs are rejected.
MAX_PROGRAM_SIZE = 100


@functools.cache
def options() -> Any:
    """RE2's options for checking: errors come back to the caller as text, not on stderr."""
    import re2

    out = re2.Options()
    out.log_errors = False
    return out


def re2_problem(pattern: str) -> str | None:
    """Why the engine would refuse ``pattern``, or None when it is fine."""
    import re2

    try:
        compiled = re2.compile(pattern, options())
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        text = detail.decode() if isinstance(detail, bytes) else str(detail)
        return f"not a valid RE2 regular expression ({text})"
    if compiled.programsize > MAX_PROGRAM_SIZE:
        return (f"too complex for the engine (RE2 program size {compiled.programsize} > "
                f"{MAX_PROGRAM_SIZE}); simplify it, e.g. fewer bounded repetitions")
    return None
