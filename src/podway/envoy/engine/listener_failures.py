"""Listeners Envoy accepted and then could not serve: found in its log (issue 23.2).

Two engines that get one listener at the same moment may both bind its port (Envoy sets
``SO_REUSEADDR``; neither listens yet): both accept the update, then the second ``listen()``
fails. That happens after the ACK, so no NACK is sent; Envoy logs it, counts
``listener_create_failure`` and drops the listener. Podway reads the log line and reports the
listener as refused, so its object gets the condition a NACK would give. The refusal lasts until
the engine acknowledges a later listener update (Envoy adds the listener again then).

No I/O: ``line`` takes one log line; hooks are called with each new failure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from podway.engines.member_health import Refusal

_PATTERNS = (
    # Envoy >= 1.3x: the listen() of the main thread, after the update was accepted.
    re.compile(r"final pre-worker listener init for listener '(?P<name>[^']+)' failed: "
               r"(?P<why>.*)$"),
    # Older Envoy: the listener could not be added to a worker.
    re.compile(r"listener '(?P<name>[^']+)' failed to listen on address '[^']*' on worker"
               r"(?P<why>.*)$"),
)
_ERRNO = {"98": "address already in use", "13": "permission denied",
          "99": "address not available"}


def describe(why: str) -> str:
    """Envoy's words made plain: ``cannot listen() errno=98`` → what it means."""
    why = why.strip() or "no reason given"
    found = re.search(r"errno=(\d+)", why)
    meaning = _ERRNO.get(found.group(1)) if found else None
    said = f"{why} ({meaning})" if meaning else why
    return (f"the engine accepted the listener, then could not listen on its port: {said}; "
            "is another engine or program listening there?")


class ListenerFailures:
    """The failures seen in one engine's log, the newest per listener."""

    def __init__(self) -> None:
        self._seq = 0
        self._current: dict[str, Refusal] = {}
        self._hooks: list[Callable[[Refusal], None]] = []

    def subscribe(self, hook: Callable[[Refusal], None]) -> None:
        self._hooks.append(hook)

    def line(self, text: str) -> None:
        for pattern in _PATTERNS:
            found = pattern.search(text)
            if found is not None:
                # Unique across this engine's restarts too: the controller tells each once.
                self._seq = max(self._seq + 1, time.time_ns())
                failure = Refusal(found.group("name"), self._seq, describe(found.group("why")))
                self._current[failure.listener] = failure
                for hook in self._hooks:
                    hook(failure)
                return

    def items(self) -> tuple[Refusal, ...]:
        return tuple(sorted(self._current.values(), key=lambda f: f.seq))
