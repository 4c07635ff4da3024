"""Status: the one document of what Podway makes of every object (``document``).

Writers read it: the status file (``run``/``validate --status-file``), the golden tests, and the
Kubernetes status writer (only the leader writes). See docs/run.md for the format.
"""

from podway.status.document import (
    NOT_OWNED,
    ObjectEntry,
    StatusDocument,
    build,
    of_state,
    origins_of,
)

__all__ = ["NOT_OWNED", "ObjectEntry", "StatusDocument", "build", "of_state", "origins_of"]
