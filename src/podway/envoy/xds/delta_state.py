"""The state a delta stream (``podway.envoy.xds.delta``) keeps per type: what Envoy has, was
sent and has not answered, what waits."""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.envoy.xds.refusals import Refusals


@dataclass(frozen=True, slots=True)
class Sent:
    """One response Envoy has not answered yet."""

    version: str  # system version
    resources: tuple[tuple[str, str], ...]  # (name, digest) sent
    removed: tuple[str, ...]
    stand_ins: frozenset[str] = frozenset()  # names sent as placeholders


@dataclass(slots=True)
class DeltaType:
    wildcard: bool
    names: set[str] = field(default_factory=set)
    known: dict[str, str] = field(default_factory=dict)  # name → version Envoy has (or was sent)
    accepted: dict[str, str] = field(default_factory=dict)  # name → version Envoy ACKed
    nonces: dict[str, Sent] = field(default_factory=dict)  # responses not answered yet
    retry: set[str] = field(default_factory=set)  # NACKed removals: sent with the next change
    refusals: Refusals = field(default_factory=Refusals)
    groups: list[frozenset[str]] = field(default_factory=list)  # isolating: one response each
    rejected: bool = False  # the newest answer was a NACK
    rejected_at: float = 0.0  # clock() when that NACK came
    seen: str = ""  # cache version last compared against
    dirty: set[str] = field(default_factory=set)  # names to look at again regardless
    held: set[str] = field(default_factory=set)  # removals deferred until routes are current
    first: bool = True  # the stream's first response of this type is owed (sent even empty)
    asked: set[str] = field(default_factory=set)  # newly subscribed names not answered yet
    ahead: set[str] = field(default_factory=set)  # sent before Envoy subscribed (scope tables)
    backlog: set[str] = field(default_factory=set)  # past the bound: after the answer
    whole: bool = False  # the next response goes whole (scopes for a new connection manager)
