"""What a state-of-the-world engine holds: its last accepted cluster set, kept across restarts.

A delta engine that reconnects (to a restarted Podway) says which resources it holds, by name
and version (``initial_resource_versions``). A state-of-the-world engine says only the
``version_info`` it last accepted, and every cluster response is the whole set: a cluster left
out is removed at once. A new Podway that does not know what the engine holds would remove a
cluster its routes still point at (503s until the routes move), so make before break would fail
exactly when Podway restarts under a running engine.

So each time an engine acknowledges a cluster set, ``HeldClusters`` records it (the packed
clusters, by name with their digests, and the version) per node id; with a ``folder`` (the
engine's private state folder) also in a file there, written atomically (and removed when the
server stops: a graceful stop stops the engine too). A new stream whose
first cluster request carries that same version starts from the recorded set, so clusters gone
from the cache are held in the set until the routes have moved, as on a live stream. A version
that does not match (another Podway's, or a record lost) recalls nothing: the stream behaves as
before, a best effort.

Invariants: a record is only ever the set an engine acknowledged under that version; a file that
cannot be read or written is logged and otherwise ignored (never fatal, never a traceback).
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
from google.protobuf.message import DecodeError

from podway.envoy_config import Resource

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeldSet:
    """A cluster set an engine acknowledged: its version and, by name, (digest, packed)."""

    version: str
    clusters: dict[str, tuple[str, Any]]


class HeldClusters:
    """Per engine (node id): the last cluster set it acknowledged (see the module docstring)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._by_node: dict[str, HeldSet] = {}

    def remember(self, node: str, version: str, digests: dict[str, str],
                 packed: dict[str, Any]) -> None:
        if not node or not version:
            return
        before = self._by_node.get(node)
        if before is not None and before.version == version:
            return
        held = HeldSet(version, {n: (digests[n], packed[n]) for n in digests})
        self._by_node[node] = held
        if self.folder is not None:
            self._write(node, held)

    def recall(self, node: str, version: str) -> HeldSet | None:
        """The set acknowledged under ``version`` by ``node``, if that is the one recorded."""
        if not node or not version:
            return None
        held = self._by_node.get(node)
        if held is None and self.folder is not None:
            held = self._read(node)
        return held if held is not None and held.version == version else None

    def discard_files(self) -> None:
        """Remove the records from the folder (Podway stops, and its engine with it)."""
        if self.folder is None:
            return
        for path in self.folder.glob("sotw-clusters-*.pb*"):
            with contextlib.suppress(OSError):
                path.unlink()

    def _path(self, node: str) -> Path:
        assert self.folder is not None
        return self.folder / f"sotw-clusters-{hashlib.sha256(node.encode()).hexdigest()[:16]}.pb"

    def _write(self, node: str, held: HeldSet) -> None:
        record = d.DiscoveryResponse(version_info=held.version, type_url=node)
        record.resources.extend(packed for _, packed in held.clusters.values())
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

    def _read(self, node: str) -> HeldSet | None:
        path = self._path(node)
        try:
            record = d.DiscoveryResponse.FromString(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, DecodeError) as exc:
            log.warning("cannot read the clusters engine %s held from %s: %s", node, path, exc)
            return None
        if record.type_url != node:
            return None
        clusters: dict[str, tuple[str, Any]] = {}
        for packed in record.resources:
            cluster = cluster_pb2.Cluster()
            if not packed.Unpack(cluster):
                return None
            resource = Resource.of(cluster.name, cluster)  # the cache's digest of it
            clusters[cluster.name] = (resource.digest, resource.packed)
        held = HeldSet(record.version_info, clusters)
        self._by_node[node] = held
        return held

