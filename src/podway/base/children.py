"""Child processes tied to their parent's life."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable

#: How long a killed command's pipes may take to reach their end (``run_command``).
DRAIN_S = 5.0


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


async def run_command(*argv: str, stdin: bytes | None = None,
                      stdout: int = asyncio.subprocess.PIPE,
                      stderr: int = asyncio.subprocess.PIPE) -> tuple[int, bytes, bytes]:
    """Run ``argv`` to its end: its exit status, and its output and error where piped (else
    ``b""``). A missing program raises ``FileNotFoundError``, as ``create_subprocess_exec``.

    Cancelled meanwhile (a timeout, a stop), the command is killed and its pipes read to their
    end (``DRAIN_S`` at most: a grandchild may hold them; then they are closed) before the
    cancellation goes on: a command is never left running behind its caller, and no pipe is
    left for the garbage collector to close after the event loop has gone ("Event loop is
    closed" from ``BaseSubprocessTransport.__del__``)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=stdout, stderr=stderr)
    try:
        out, err = await proc.communicate(stdin)
    except BaseException:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        try:
            await asyncio.wait_for(asyncio.shield(proc.communicate()), DRAIN_S)
        except TimeoutError:
            _close_pipes(proc)
        except BaseException:  # cancelled again while draining
            _close_pipes(proc)
            raise
        raise
    return proc.returncode or 0, out or b"", err or b""


def _close_pipes(proc: asyncio.subprocess.Process) -> None:
    """Our ends of a killed command's pipes closed now, while the loop runs (a grandchild may
    still hold them; the drain then ends with them), not in the transport's ``__del__`` after
    the loop has gone. asyncio's Process has no public close; its transport is what it
    closes."""
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()
