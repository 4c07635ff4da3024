"""Feed a pipeline's states to a supervised HAProxy and say what it cannot serve.

Each state's IR is applied (``HAProxyEngine.apply``); a rendering HAProxy refuses is logged
and the last good configuration keeps serving. Every object with a feature the engine cannot
serve exactly is logged once as an ``UnsupportedValue`` event line (object, feature), and again
only when the set changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from podway.haproxy.process import HAProxyEngine, HAProxyError
from podway.haproxy.report import REASON, Unsupported
from podway.pipeline import Pipeline

log = logging.getLogger(__name__)


async def follow(pipeline: Pipeline, engine: HAProxyEngine,
                 applied: Callable[[int], None] = lambda generation: None) -> None:
    """Apply every state; ``applied(generation)`` after each one HAProxy serves."""
    said: set[Unsupported] = set()
    async for state in pipeline.states():
        try:
            how = await engine.apply(state.ir)
        except HAProxyError as e:
            log.error("haproxy engine: generation %d not applied (the previous config keeps "
                      "serving): %s", state.generation, e)
            continue
        log.debug("haproxy engine: generation %d applied by %s", state.generation, how)
        applied(state.generation)
        now = set(engine.counters.unsupported)
        for u in sorted(now - said, key=lambda u: (u.subject, u.feature)):
            log.warning("event %s on %s: %s", REASON, u.origin or u.subject, u.message)
        said = now
