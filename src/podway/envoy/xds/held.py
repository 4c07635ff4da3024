"""What a state-of-the-world engine holds: the cluster sets it may have applied, kept across
restarts.

A delta engine that reconnects (to a restarted Podway) says which resources it holds, by name
and version (``initial_resource_versions``). A state-of-the-world engine says only the
``version_info`` it last accepted, and every cluster response is the whole set: a cluster left
out is removed at once. A new Podway that does not know what the engine holds would remove a
cluster its routes still point at (503s until the routes move), so make before break would fail
exactly when Podway restarts under a running engine.

So ``HeldClusters`` keeps, per node id, the sets the engine may hold under each version: every
cluster set is recorded *before* it is sent (``sent``), and when the engine acknowledges one
(``remember``) the sets sent before it are dropped. With a ``folder`` (the engine's private
state folder) the record is also a file there, written atomically (and removed when the server
stops: a graceful stop stops the engine too). Recording at send time matters: Podway may be
killed after the engine applied and acknowledged a set but before that acknowledgement was
read; the engine then names a version no acknowledgement ever reached, and only a record made
when the set went out knows what it holds (tests/e2e/test_survive.py saw 503s without it). A
new stream whose first cluster request carries a recorded version starts from that set, so
clusters gone from the cache are held in the set until the routes have moved, as on a live
stream. A version not on record (another Podway's, or a record lost) recalls nothing: the
stream behaves as before, a best effort.

Invariants: the set recalled for a version is exactly the set sent under that version (an
engine names a version only once it accepted that response); the record holds the last
acknowledged set and at most ``KEPT`` sets in all; a file that cannot be read or written is
logged and otherwise ignored (never fatal, never a traceback).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2 as d
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from podway.envoy.config import Resource

log = logging.getLogger(__name__)

KEPT = 8  # sets on record per engine: the acknowledged one and those sent since, newest kept


@dataclass(frozen=True, slots=True)
class HeldSet:
    """A cluster set sent to an engine: its version and, by name, (digest, packed)."""

    version: str
    clusters: dict[str, tuple[str, Any]]


class HeldClusters:
    """Per engine (node id): the cluster sets it may hold (see the module docstring)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._by_node: dict[str, tuple[HeldSet, ...]] = {}

    def sent(self, node: str, version: str, digests: dict[str, str],
             packed: dict[str, Any]) -> None:
        """A set about to be sent under ``version``: on record before it goes out."""
        if not node or not version:
            return
        before = self._sets(node)
        if before and _same(before[-1], version, digests):
            return
        kept = tuple(s for s in before if s.version != version)  # a set sent again: the last
        added = HeldSet(version, {n: (digests[n], packed[n]) for n in digests})
        self._store(node, (*kept[:1], *kept[1:][-(KEPT - 2):], added) if kept else (added,))

    def remember(self, node: str, version: str, digests: dict[str, str],
                 packed: dict[str, Any]) -> None:
        """The engine acknowledged the set of ``version``: the sets sent before it go."""
        if not node or not version:
            return
        before = self._sets(node)
        if before and _same(before[0], version, digests):
            return
        versions = [s.version for s in before]
        later = before[versions.index(version) + 1:] if version in versions else before
        acked = HeldSet(version, {n: (digests[n], packed[n]) for n in digests})
        self._store(node, (acked, *later[-(KEPT - 1):]))

    def recall(self, node: str, version: str) -> HeldSet | None:
        """The set sent to ``node`` under ``version``, if it is on record."""
        if not node or not version:
            return None
        return next((s for s in self._sets(node) if s.version == version), None)

    def discard_files(self) -> None:
        """Remove the records from the folder (Podway stops, and its engine with it)."""
        if self.folder is None:
            return
        for path in self.folder.glob("sotw-clusters-*.pb*"):
            with contextlib.suppress(OSError):
                path.unlink()

    def _sets(self, node: str) -> tuple[HeldSet, ...]:
        found = self._by_node.get(node)
        if found is None:
            found = self._by_node[node] = self._read(node) if self.folder is not None else ()
        return found

    def _store(self, node: str, sets: tuple[HeldSet, ...]) -> None:
        self._by_node[node] = sets
        if self.folder is not None:
            self._write(node, sets)

    def _path(self, node: str) -> Path:
        assert self.folder is not None
        return self.folder / f"sotw-clusters-{hashlib.sha256(node.encode()).hexdigest()[:16]}.pb"

    def _write(self, node: str, sets: tuple[HeldSet, ...]) -> None:
        """One record: a response naming the node, holding one packed response per set."""
        record = d.DiscoveryResponse(type_url=node)
        for held in sets:
            one = d.DiscoveryResponse(version_info=held.version)
            one.resources.extend(packed for _, packed in held.clusters.values())
            record.resources.add().Pack(one)
        path = self._path(node)
        tmp = path.with_name(path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(record.SerializeToString())
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot record the clusters engine %s holds in %s: %s", node, path,
                        exc.strerror or exc)

    def _read(self, node: str) -> tuple[HeldSet, ...]:
        path = self._path(node)
        try:
            record = d.DiscoveryResponse.FromString(path.read_bytes())
        except FileNotFoundError:
            return ()
        except (OSError, DecodeError) as exc:
            log.warning("cannot read the clusters engine %s held from %s: %s", node, path, exc)
            return ()
        if record.type_url != node:
            return ()
        if record.version_info:  # the earlier form: one acknowledged set
            held = _held_set(record.version_info, record.resources)
            return () if held is None else (held,)
        sets: list[HeldSet] = []
        for packed in record.resources:
            one = d.DiscoveryResponse()
            if not packed.Unpack(one) or (held := _held_set(one.version_info,
                                                             one.resources)) is None:
                return ()
            sets.append(held)
        return tuple(sets)


def _same(held: HeldSet, version: str, digests: dict[str, str]) -> bool:
    return held.version == version and len(held.clusters) == len(digests) and all(
        digests.get(n) == dg for n, (dg, _) in held.clusters.items())


def _held_set(version: str, resources: Any) -> HeldSet | None:
    clusters: dict[str, tuple[str, Any]] = {}
    for packed in resources:
        if not isinstance(packed, any_pb2.Any):
            return None
        cluster = cluster_pb2.Cluster()
        if not packed.Unpack(cluster):
            return None
        resource = Resource.of(cluster.name, cluster)  # the cache's digest of it
        clusters[cluster.name] = (resource.digest, resource.packed)
    return HeldSet(version, clusters)
