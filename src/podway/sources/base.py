"""The seam between sources and the pipeline: a source-neutral update and the ``Source`` protocol.

A source (a folder of manifests, the Kubernetes API) turns whatever it watches into a stream of
``SourceUpdate``: one consistent, immutable snapshot plus what changed since the previous one and
every error it currently has. Nothing downstream knows which source produced an update, so the
file source and the Kubernetes source feed the same pipeline (as Envoy Gateway's file and
Kubernetes providers feed the same runner).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from podway.model.loader import LoadError
from podway.model.snapshot import Key, Snapshot


@dataclass(frozen=True, slots=True)
class SourceUpdate:
    """One consistent view of the source: the snapshot and every current load error."""

    snapshot: Snapshot
    errors: tuple[LoadError, ...]
    stale_files: tuple[str, ...] = ()  # inputs served from their last good load
    changed: tuple[tuple[str, Key], ...] | None = None  # (kind, key) since the last update;
    # None: unknown, the consumer diffs (always None for the first update)
    warnings: tuple[LoadError, ...] = ()  # inputs left out on purpose, e.g. kinds not read


class Source(Protocol):
    """Anything that yields snapshot updates until cancelled.

    The first update is the complete initial state; each later one replaces the previous one.
    A source never raises out of ``watch`` for bad input (that is what ``errors`` is for); it
    raises only when it cannot go on at all (e.g. the folder's watch failed for good).
    """

    def watch(self) -> AsyncIterator[SourceUpdate]: ...
