"""What every long-running sub-command shares: logging setup and stop-on-signal."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Coroutine
from typing import Any

from podway.errors import ConfigError

LEVELS = ("debug", "info", "warning", "error")


def setup_logging(level: str) -> None:
    if level.lower() not in LEVELS:
        raise ConfigError(f"--log-level must be one of {', '.join(LEVELS)}, not {level!r}")
    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("grpc").setLevel(logging.WARNING)


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
