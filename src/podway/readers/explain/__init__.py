"""``podway explain``: one request walked through the IR, with every decision and the verdict.

``query`` parses what is asked, ``walk`` decides (pure, over the IR), ``model`` holds the
answer, ``render`` prints it with rich; ``diagram`` draws the whole traffic path. Nothing here
does I/O: the command and the admin endpoint feed it an IR from a folder or a running instance.
"""

from __future__ import annotations

from podway.readers.explain.model import (
    Candidate,
    Explanation,
    Mark,
    MemberView,
    Outcome,
    OutcomeKind,
    PoolView,
    Step,
    Verdict,
)
from podway.readers.explain.pools import Health
from podway.readers.explain.query import Query, QueryError, parse
from podway.readers.explain.walk import Context, explain

__all__ = [
    "Candidate",
    "Context",
    "Explanation",
    "Health",
    "Mark",
    "MemberView",
    "Outcome",
    "OutcomeKind",
    "PoolView",
    "Query",
    "QueryError",
    "Step",
    "Verdict",
    "explain",
    "parse",
]
