"""Child processes tied to their parent's life."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable


def isolation_flags() -> list[str]:
    """This interpreter's isolation, for a Python child of ours (``sys.executable``): a Podway
    started with ``-I`` (or ``-E``, ``-s``) must not start one that reads ``PYTHONPATH`` or
    the user's site-packages."""
    if sys.flags.isolated:
        return ["-I"]
    return [flag for flag, on in (("-E", sys.flags.ignore_environment),
                                  ("-s", sys.flags.no_user_site)) if on]


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when this process dies (Linux).

    Used with ``start_new_session=True``: a signal sent to this process's group (Ctrl-C, a
    service manager) then reaches only this process, which stops its child in order (BIRD
    withdraws before it goes), while a crash of this process still takes the child with it.

    Everything is resolved here, in the parent: the child of a threaded process (gRPC runs
    threads) may only do async-signal-safe work between fork and exec, and dlopen is not (it
    can deadlock on a lock another thread held at fork). If the parent died before prctl took
    effect the signal would never come, so the child checks and exits instead.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, sig)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return preexec
