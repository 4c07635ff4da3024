"""The Lease record and the election's decisions, without I/O (client-go's leaderelection rules).

A ``LeaseRecord`` is the ``spec`` of a ``coordination.k8s.io/v1`` Lease: ``holderIdentity``,
``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` and ``leaseTransitions``. A
``Candidate`` decides, from the record the API holds right now and this process's monotonic
clock, which record (if any) to write; ``podway.programs.controller.leader`` does the reading and
writing.

Invariants (tested in ``tests/unit/programs/controller/test_lease.py``):

- A lease someone else holds is taken only once this process has seen the *same* record for its
  ``leaseDurationSeconds``, counted on this process's monotonic clock from when it first saw
  that record — never from the record's own ``renewTime``, so clock skew between replicas does
  not matter (as in client-go, which keeps an ``observedTime``).
- A released lease (empty holder, what a leader writes when it stops cleanly) is taken at once.
- Taking the lease from anyone else (or from nobody) counts ``leaseTransitions`` up and sets
  ``acquireTime``; renewing one's own keeps both and moves ``renewTime``.
- The writer sends every update with the ``resourceVersion`` it read: of two candidates that
  read the same record, one update wins and the other gets ``409 Conflict`` and tries later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any


def micro_time(when: datetime | None = None) -> str:
    """A ``MicroTime`` as the API server writes it (always six fraction digits, UTC)."""
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRecord:
    """A Lease's ``spec`` (times as the API holds them: RFC 3339 text)."""

    holder: str = ""  # holderIdentity; empty: released, nobody leads
    duration_s: int = 0  # leaseDurationSeconds
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0  # leaseTransitions

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        """The record of a Lease's ``spec``; fields of the wrong type count as absent."""
        spec = spec or {}

        def number(key: str) -> int:
            value = spec.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        def text(key: str) -> str | None:
            value = spec.get(key)
            return value if isinstance(value, str) else None

        return cls(holder=text("holderIdentity") or "", duration_s=number("leaseDurationSeconds"),
                   acquire_time=text("acquireTime"), renew_time=text("renewTime"),
                   transitions=number("leaseTransitions"))

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"holderIdentity": self.holder,
                                "leaseDurationSeconds": self.duration_s,
                                "leaseTransitions": self.transitions}
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


class Candidate:
    """One replica's view of the lease (see the module docstring). ``now`` is monotonic
    seconds; ``wall`` the MicroTime text to stamp into a record."""

    def __init__(self, identity: str, *, duration_s: int) -> None:
        self.identity = identity
        self.duration_s = duration_s
        self.observed: LeaseRecord | None = None
        self.observed_at = 0.0  # monotonic time ``observed`` was first seen

    def observe(self, found: LeaseRecord | None, *, now: float) -> None:
        if found != self.observed:
            self.observed, self.observed_at = found, now

    def held_by_other(self, *, now: float) -> bool:
        """Someone else holds a lease that has not expired in this process's eyes."""
        record = self.observed
        return (record is not None and bool(record.holder) and record.holder != self.identity
                and now < self.observed_at + record.duration_s)

    def want(self, found: LeaseRecord | None, *, now: float, wall: str) -> LeaseRecord | None:
        """The record to write given what the API holds (None: no Lease yet), or None when
        another holder's lease is still live (do not try)."""
        self.observe(found, now=now)
        if self.held_by_other(now=now):
            return None
        if found is None:
            return LeaseRecord(holder=self.identity, duration_s=self.duration_s,
                               acquire_time=wall, renew_time=wall, transitions=0)
        if found.holder == self.identity:
            return replace(found, duration_s=self.duration_s, renew_time=wall)
        return LeaseRecord(holder=self.identity, duration_s=self.duration_s, acquire_time=wall,
                           renew_time=wall, transitions=found.transitions + 1)

    def wrote(self, record: LeaseRecord, *, now: float) -> None:
        """The API took ``record``: it is what this process last saw."""
        self.observed, self.observed_at = record, now

    def release(self, *, wall: str) -> LeaseRecord | None:
        """The record that hands the lease back (empty holder, 1 s), when it is ours."""
        record = self.observed
        if record is None or record.holder != self.identity:
            return None
        return replace(record, holder="", duration_s=1, renew_time=wall, acquire_time=wall)
