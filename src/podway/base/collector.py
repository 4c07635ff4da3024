"""The cyclic garbage collector paused for a stretch of work that makes no cyclic garbage.

CPython starts a collection whenever allocations cross a threshold; while a process builds a
large heap of live objects (imports, a translation) each collection only rescans what is alive.
Reference counting still frees everything at once; the collector resumes afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside; the collector is enabled again after if it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
