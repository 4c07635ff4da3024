"""What the HAProxy engine cannot serve exactly: one record per object and feature.

The renderer never serves an approximation silently: a route that needs a feature it cannot
express is answered ``500`` (fail closed: an access rule or a rate limit that is not enforced
would let through what the object forbids) and recorded here; the caller turns each record into
an ``UnsupportedValue`` condition/event on ``origin``.
"""

from __future__ import annotations

from dataclasses import dataclass

from podway.engines.member_health import Finding
from podway.model.base import ObjectRef

REASON = "UnsupportedValue"


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsupported:
    subject: str  # the IR name (route, pool, listener) that needs the feature
    feature: str  # what HAProxy cannot do as asked, e.g. "request mirroring"
    origin: ObjectRef | None = None
    # True: not served at all (answered 500/503, refused); False: served without the feature
    # or with a named approximation.
    closed: bool = False

    @property
    def message(self) -> str:
        return f"the haproxy engine cannot serve {self.feature} ({self.subject})"


def findings(reports: tuple[Unsupported, ...]) -> tuple[Finding, ...]:
    """The reports on objects as a remote engine sends them to the controller (one per object
    and message; sorted, so an unchanged set is an equal tuple)."""
    return tuple(sorted({Finding(u.origin.kind, u.origin.namespace, u.origin.name, u.message,
                                 u.closed) for u in reports if u.origin is not None}))
