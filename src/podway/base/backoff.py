"""The one retry-delay policy: exponential, capped, jittered, and honouring Retry-After.

Used by the Kubernetes informers (re-list/re-watch), the agent's per-key work queue and the
Envoy supervisor. Callers count *consecutive* failures (what resets the count is theirs to say:
a healthy watch, a successful reconcile, an Envoy that lived long enough).

Jitter is "equal jitter" shrinking towards ``1 - jitter`` of the exponential step, so the delay
never exceeds ``cap`` and many clients restarting together spread out instead of retrying in
lock-step. A server's Retry-After is a lower bound (we never retry earlier than asked), itself
capped by ``retry_after_cap`` so a bogus header cannot park a client for a day.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    base: float = 0.2  # seconds after the first failure (before jitter)
    cap: float = 30.0  # longest exponential step, seconds
    jitter: float = 0.2  # fraction of each step taken off at random; 0 = deterministic
    retry_after_cap: float = 300.0  # longest wait a server's Retry-After can impose, seconds
    rand: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def delay(self, failures: int, *, retry_after: float | None = None) -> float:
        """Seconds to wait after ``failures`` consecutive failures (0 for none)."""
        if failures <= 0:
            step = 0.0
        else:
            step = min(self.cap, self.base * 2 ** min(failures - 1, 32))
            step *= 1.0 - self.jitter * self.rand()
        if retry_after is not None:
            step = max(step, min(max(retry_after, 0.0), self.retry_after_cap))
        return float(step)
