"""One way for a test to wait for something that settles: ``eventually``.

Polls instead of sleeping a fixed time, so a test is as fast as the system under test and fails
with what it last saw instead of hanging. For waits on pipeline states or source updates, the
helpers that await those streams (``Bed.until``, ``pipeline.wait_for``) are the better tool.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

NOT_YET = object()


async def eventually(check: Callable[[], Any], *, within: float = 20.0, every: float = 0.01,
                     ignoring: tuple[type[BaseException], ...] = ()) -> Any:
    """Call ``check`` (plain or async) every ``every`` seconds until it returns something
    truthy, and return that. Errors of the ``ignoring`` types count as "not yet" (a server
    still starting refuses connections). After ``within`` seconds: AssertionError naming the last
    value or error seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last: object = NOT_YET
    while True:
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as error:
            value, last = None, error
        else:
            last = value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not so within {within} s; last seen: {last!r}")
        await asyncio.sleep(every)
