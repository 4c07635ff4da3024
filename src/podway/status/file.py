"""The status file: the status document as YAML, replaced atomically.

Invariants: a reader never sees a half-written file (write a temporary file beside it, then
rename); the file is the owner's only (mode 0600: it lists every object, host and address
served, docs/security.md). A file that cannot be written (missing folder, a directory in its
place, a read-only filesystem) never stops serving: ``StatusFile.write`` reports the failure —
logged once per distinct cause, and again when writing works again — and returns it, so
one-shot commands can turn it into an exit status.
"""

from __future__ import annotations

import contextlib
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

from podway.ir.dump import dump_yaml
from podway.pipeline import Pipeline
from podway.status.document import StatusDocument
from podway.status.incremental import DocumentBuilder

log = logging.getLogger(__name__)


class StatusFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._failing: str | None = None  # the last failure logged, until a write works

    def write(self, document: StatusDocument, *, stamp: bool = True) -> str | None:
        """Write ``document``; None on success, else why it failed (one line)."""
        data = document.to_data(updated=datetime.now(UTC) if stamp else None)
        error = write_atomic(self.path, dump_yaml(data))
        if error is not None and error != self._failing:
            log.error("%s (serving goes on; the status is not written)", error)
        elif error is None and self._failing is not None:
            log.info("status file %s is written again", self.path)
        self._failing = error
        return error

    async def follow(self, pipeline: Pipeline) -> None:
        """Rewrite the file for each state the pipeline publishes (coalesced: a slow write
        skips to the newest state), until cancelled. The document is built incrementally;
        the YAML is still the whole document."""
        documents = DocumentBuilder()
        async for state in pipeline.states():
            self.write(documents.of_state(state))


def write_atomic(path: Path, text: str) -> str | None:
    """Replace ``path`` with ``text`` atomically; None on success, else the reason."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if path.is_dir():
            return f"cannot write status file {path}: it is a directory"
        # Owner-only (0600) whatever the umask, made fresh: never through a link someone put
        # at the temporary name, never keeping an older file's wider mode.
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return f"cannot write status file {path}: {exc.strerror or exc}"
    return None
