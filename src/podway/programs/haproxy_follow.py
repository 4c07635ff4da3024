"""Feed a pipeline's states to a supervised HAProxy and say what it cannot serve.

Each state's IR is applied (``HAProxyEngine.apply``); a rendering HAProxy refuses is logged
and the last good configuration keeps serving. A listener whose port HAProxy could not bind
is recorded as the engine's refusal of that listener (``Pipeline.engine_refused``), so its
object — the Gateway or ListenerSet that declared it, the Service — says so in the status
file; it is cleared once a configuration serving it is applied. Every object with a feature
the engine cannot serve exactly is logged once as an ``UnsupportedValue`` event line (object,
feature), and again only when the set changes; with a status file, each becomes an
``UnsupportedValue`` problem on its object there (an error when the engine does not serve it at
all, else a warning), written once the state is applied.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from podway.envoy import types
from podway.envoy.xds.protocol import Ack
from podway.haproxy.process import HAProxyEngine, HAProxyError
from podway.haproxy.report import REASON, Unsupported
from podway.pipeline import Pipeline, State
from podway.status.file import StatusFile
from podway.status.incremental import DocumentBuilder
from podway.translate.core.problems import Problem, Reason, Severity

log = logging.getLogger(__name__)

#: The node a local HAProxy's refusals are recorded for (as an Envoy's are for its node id).
NODE = "haproxy"


async def follow(pipeline: Pipeline, engine: HAProxyEngine,
                 applied: Callable[[int], None] = lambda generation: None,
                 status: StatusFile | None = None) -> None:
    """Apply every state; ``applied(generation)`` after each one HAProxy serves."""
    said: set[Unsupported] = set()
    documents = DocumentBuilder()
    async for state in pipeline.states():
        try:
            how = await engine.apply(state.ir)
        except HAProxyError as e:
            log.error("haproxy engine: generation %d not applied (the previous config keeps "
                      "serving): %s", state.generation, e)
            for listener, reason in e.refused:  # its port: on the object that declared it
                pipeline.engine_refused(NODE, listener, reason)
            if status is not None and state.rejections:
                status.write(documents.of_state(state))
            continue
        # Served: a listener refused before is no longer (as Envoy's ACK clears its NACK).
        pipeline.on_event(Ack(node=NODE, type_url=types.LISTENER, version="", nonce="",
                              resources=tuple(ls.name for ls in state.ir.listeners)))
        log.debug("haproxy engine: generation %d applied by %s", state.generation, how)
        now = set(engine.counters.unsupported)
        for u in sorted(now - said, key=lambda u: (u.subject, u.feature)):
            log.warning("event %s on %s: %s", REASON, u.origin or u.subject, u.message)
        said = now
        if status is not None:
            status.write(documents.of_state(with_reports(state, engine.counters.unsupported)))
        applied(state.generation)  # last: a reader woken by it finds the status written


def with_reports(state: State, reports: tuple[Unsupported, ...]) -> State:
    """``state`` with each report on an object as an ``UnsupportedValue`` problem."""
    extra = tuple(Problem(ref=u.origin, reason=Reason.UNSUPPORTED_VALUE, message=u.message,
                          severity=Severity.ERROR if u.closed else Severity.WARNING)
                  for u in reports if u.origin is not None)
    if not extra:
        return state
    return dataclasses.replace(state, result=dataclasses.replace(
        state.result, problems=state.result.problems + extra))
