"""Regular expressions as the engine runs them: RE2, with Envoy's program-size limit.

Python's ``re`` accepts lookarounds, backreferences and atomic groups that RE2 does not, and
Envoy refuses (NACKs) a whole route table over one pattern whose compiled program exceeds its
size limit. Checking here turns that into a problem on the one object that wrote the pattern.
"""

from __future__ import annotations

import re2

# Envoy's default ``re2.max_program_size.error_level``: larger programs are rejected.
MAX_PROGRAM_SIZE = 100

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors come back to the caller as text, not on stderr


def re2_problem(pattern: str) -> str | None:
    """Why the engine would refuse ``pattern``, or None when it is fine."""
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        text = detail.decode() if isinstance(detail, bytes) else str(detail)
        return f"not a valid RE2 regular expression ({text})"
    if compiled.programsize > MAX_PROGRAM_SIZE:
        return (f"too complex for the engine (RE2 program size {compiled.programsize} > "
                f"{MAX_PROGRAM_SIZE}); simplify it, e.g. fewer bounded repetitions")
    return None
