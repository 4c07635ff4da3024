"""Stopping helper tasks without losing the caller's own cancel.

The usual way to stop a helper task, ``task.cancel()`` then ``with suppress(CancelledError):
await task``, has a trap: a cancel of the *caller* that arrives while it awaits the helper
raises the same ``CancelledError`` and is suppressed with it, so the caller carries on as if
nobody had asked it to stop. A controller's ``TaskGroup`` then waits for that child forever
(tests/integration/controller/test_stopping.py). ``cancel_and_wait`` does the same job without the
trap.

Python 3.11's ``asyncio.wait_for`` has the same trap (it returns the result when the awaited
thing completes in the loop turn that delivers the caller's cancel; fixed in 3.12): wait with
``async with asyncio.timeout(...)`` instead, which leaves the cancel to the task itself.

Invariant: ``cancel_and_wait`` returns only after every task given has ended, and raises only
the caller's own cancel; the tasks' outcomes (a result, an error, their cancellation) are
retrieved and dropped — the caller asked them to stop, not for what they produced.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and wait until each has ended (see the module docstring)."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    try:
        await asyncio.wait(tasks)
    finally:
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: no "exception was never retrieved" later


async def run_until_signal(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` until it ends or SIGINT/SIGTERM arrives; a signal cancels it (clean stop)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
