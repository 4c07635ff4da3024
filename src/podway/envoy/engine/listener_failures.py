"""Listeners Envoy accepted and then could not serve: found in its log (issue 23.2).

Two engines that get one listener at the same moment may both bind its port (Envoy sets
``SO_REUSEADDR``; neither listens yet): both accept the update, then the second ``listen()``
fails. That happens after the ACK, so no NACK is sent; Envoy logs it, counts
``listener_create_failure`` and drops the listener. Podway reads the log line and reports the
listener as refused, so its object gets the condition a NACK would give. The refusal lasts until
the engine acknowledges a later listener update (Envoy adds the listener again then).

The log's wording is Envoy's to change, so it is not the only witness: Envoy also counts each
such failure (``listener_manager.listener_create_failure``). The engine reads that counter
(``counted``); failures it counted that no log line explained, once the counter has held still
for one look (the log may lag), are matched to the listeners Envoy now holds only as draining
(its config dump: a listener that failed is dropped that way) and reported like a log-read one.
A listener the controller removed in the same moment drains too and could be named as well;
that only happens when the log line was missed.

No I/O: ``line`` takes one log line, ``counted`` the counter and the draining-only listeners;
hooks are called with each new failure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

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


COUNTED = ("the engine accepted the listener, then could not create it (Envoy counted "
           "listener_manager.listener_create_failure; its log gave no reason Podway reads); "
           "is another engine or program listening on its port?")


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
        self._logged = 0  # failures read from the log
        self._logged_names: set[str] = set()  # since the last look at the counter
        self._base = 0  # failures Envoy counted that are not this engine's to report
        self._last_total = 0
        self._draining: set[str] = set()  # listeners seen draining-only since the last report

    def subscribe(self, hook: Callable[[Refusal], None]) -> None:
        self._hooks.append(hook)

    def line(self, text: str) -> None:
        for pattern in _PATTERNS:
            found = pattern.search(text)
            if found is not None:
                self._logged += 1
                self._logged_names.add(found.group("name"))
                self._add(found.group("name"), describe(found.group("why")))
                return

    def new_envoy(self) -> None:
        """A new Envoy is followed from its start: it counts from 0."""
        self._base, self._logged, self._last_total = 0, 0, 0
        self._logged_names.clear()
        self._draining.clear()

    def adopted(self, total: int) -> None:
        """The Envoy followed was adopted running: of the ``total`` failures it counted, those
        its log (read since adoption) did not explain happened before and are not reported."""
        self._base = max(0, total - self._logged)
        self._last_total = total

    def unexplained(self, total: int) -> int:
        """How many of Envoy's ``total`` failures no log line explained (yet)."""
        return total - self._base - self._logged

    def counted(self, total: int, draining_only: Iterable[str]) -> tuple[Refusal, ...]:
        """Take Envoy's ``listener_create_failure`` counter (``total``) and the listeners it
        holds only as draining now (looked up when ``unexplained``); once the counter is the
        same as at the last look (the log may lag), report the failures no log line explained
        as the listeners seen draining-only since, minus those the log named."""
        self._draining.update(draining_only)
        if total != self._last_total:  # still moving: give the log a look's time
            self._last_total = total
            return ()
        unexplained = self.unexplained(total)
        if unexplained <= 0:
            self._logged_names.clear()
            self._draining.clear()
            return ()
        found = tuple(self._add(name, COUNTED) for name in sorted(self._draining)
                      if name not in self._logged_names)
        self._base += unexplained
        self._logged_names.clear()
        self._draining.clear()
        return found

    def _add(self, listener: str, why: str) -> Refusal:
        # Unique across this engine's restarts too: the controller tells each once.
        self._seq = max(self._seq + 1, time.time_ns())
        failure = Refusal(listener, self._seq, why)
        self._current[failure.listener] = failure
        for hook in self._hooks:
            hook(failure)
        return failure

    def items(self) -> tuple[Refusal, ...]:
        return tuple(sorted(self._current.values(), key=lambda f: f.seq))
