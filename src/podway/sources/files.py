"""Folder of manifests → snapshots, live: the standalone-mode source.

Invariants:

* Each file is loaded on its own. A file that fails to load (bad YAML, a document that does
  not validate) keeps its *last good* objects and reports the error; a file never loaded cleanly
  contributes what did load. One bad file never takes the others down.
* An object whose content did not change keeps its identity across reloads, so the incremental
  translator (which diffs snapshots by identity) sees only what really changed: editing an
  EndpointSlice in a file that also holds its Service is still an endpoint-only change.
* Duplicates across files: the first file in path order wins, like ``podway validate``.
* Watching uses inotify (``watchfiles``) with a short debounce; bursts of writes (an editor's
  save) coalesce into one snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from podway.model.base import K8sObject
from podway.model.loader import MANIFEST_SUFFIXES, LoadError, load_text, manifest_files
from podway.model.snapshot import Snapshot

log = logging.getLogger(__name__)

Ident = tuple[str, str, str]  # kind, namespace, name


@dataclass(frozen=True, slots=True)
class FileUpdate:
    """One consistent view of the folder: the snapshot and every current load error."""

    snapshot: Snapshot
    errors: tuple[LoadError, ...]
    stale_files: tuple[str, ...] = ()  # files served from their last good load


@dataclass(slots=True)
class _Entry:
    objects: dict[Ident, K8sObject] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    good: bool = False  # ``objects`` came from an error-free load
    stale: bool = False  # the latest load failed and ``objects`` is the last good one


class FileSource:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[Path, _Entry] = {}

    def load(self) -> FileUpdate:
        """(Re)load every file under the folder and return the merged view."""
        present = set(manifest_files([self.root]))
        for path in list(self._files):
            if path not in present:
                del self._files[path]
        for path in sorted(present):
            self._reload(path)
        return self.update()

    def apply(self, changed: set[Path]) -> FileUpdate:
        """Reload only ``changed`` paths (added, modified or deleted files)."""
        for path in sorted(changed):
            if path.is_file() and _is_manifest(path, self.root):
                self._reload(path)
            else:
                self._files.pop(path, None)
        return self.update()

    def update(self) -> FileUpdate:
        objects: list[K8sObject] = []
        errors: list[LoadError] = []
        seen: dict[Ident, Path] = {}
        for path in sorted(self._files):
            entry = self._files[path]
            errors.extend(entry.errors)
            for ident, obj in entry.objects.items():
                if ident in seen:
                    errors.append(LoadError(str(path), -1,
                                            f"duplicate object, already defined in {seen[ident]}",
                                            object=str(obj.ref)))
                    continue
                seen[ident] = path
                objects.append(obj)
        stale = tuple(str(p) for p, e in sorted(self._files.items()) if e.stale)
        return FileUpdate(Snapshot.of_objects(objects), tuple(errors), stale)

    async def watch(self, *, debounce_ms: int = 30) -> AsyncIterator[FileUpdate]:
        """The first full load, then one update per burst of changes, forever."""
        from watchfiles import awatch

        yield self.load()
        async for changes in awatch(self.root, debounce=debounce_ms, step=10,
                                    recursive=True, force_polling=False):
            paths = {Path(p) for _, p in changes}
            manifests = {p for p in paths if p.suffix in MANIFEST_SUFFIXES}
            if not manifests:
                continue
            log.info("manifests changed: %s", ", ".join(sorted(str(p) for p in manifests)))
            yield self.apply(manifests)

    def _reload(self, path: Path) -> None:
        old = self._files.get(path) or _Entry()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            result_errors = [LoadError(str(path), -1, f"cannot read: {exc}")]
            loaded: list[K8sObject] = []
        else:
            result = load_text(text, source=str(path))
            result_errors, loaded = result.errors, result.objects
        fresh: dict[Ident, K8sObject] = {}
        for obj in loaded:
            ident = (obj.KIND, *obj.key)
            if ident in fresh:
                result_errors.append(LoadError(str(path), -1, "duplicate object in one file",
                                               object=str(obj.ref)))
                continue
            previous = old.objects.get(ident)
            fresh[ident] = previous if previous is not None and previous == obj else obj
        if result_errors and old.good:
            for error in result_errors:
                log.warning("manifest error (serving last good %s): %s", path.name, error)
            self._files[path] = _Entry(old.objects, list(result_errors), good=True, stale=True)
            return
        for error in result_errors:
            log.warning("manifest error: %s", error)
        self._files[path] = _Entry(fresh, list(result_errors), good=not result_errors)


def _is_manifest(path: Path, root: Path) -> bool:
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    return path.suffix in MANIFEST_SUFFIXES and not any(p.startswith(".") for p in rel.parts)
