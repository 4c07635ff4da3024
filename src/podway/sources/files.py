"""Folder of manifests → snapshots, live: the standalone-mode source.

Invariants:

* Each file is loaded on its own. A file that fails to load (bad YAML, a document that does
  not validate) keeps its *last good* objects and reports the error; a file never loaded cleanly
  contributes what did load. One bad file never takes the others down.
* An object whose content did not change keeps its identity across reloads, so the incremental
  translator (which diffs snapshots by identity) sees only what really changed: editing an
  EndpointSlice in a file that also holds its Service is still an endpoint-only change.
* Duplicates across files: the first file in path order wins, like ``podway validate``.
* Cost is O(changed files): the snapshot is patched per kind (``Snapshot.replace``) and the
  changed (kind, key) pairs go to the incremental translator, which then needs no diff.
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
from podway.model.snapshot import Key, Snapshot

log = logging.getLogger(__name__)

Ident = tuple[str, str, str]  # kind, namespace, name


@dataclass(frozen=True, slots=True)
class FileUpdate:
    """One consistent view of the folder: the snapshot and every current load error."""

    snapshot: Snapshot
    errors: tuple[LoadError, ...]
    stale_files: tuple[str, ...] = ()  # files served from their last good load
    changed: tuple[tuple[str, Key], ...] | None = None  # (kind, key) since the last update


@dataclass(slots=True)
class _Entry:
    objects: dict[Ident, K8sObject] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    good: bool = False  # ``objects`` came from an error-free load
    stale: bool = False  # the latest load failed and ``objects`` is the last good one


class FileSource:
    """Per-file state plus the merged snapshot, updated in O(changed files)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[Path, _Entry] = {}
        self._owners: dict[Ident, list[Path]] = {}  # sorted: the first one wins
        self._snapshot = Snapshot()

    def load(self) -> FileUpdate:
        """(Re)load every file under the folder and return the merged view."""
        present = set(manifest_files([self.root]))
        update = self.apply(present | set(self._files))
        return FileUpdate(update.snapshot, update.errors, update.stale_files, None)

    def apply(self, changed: set[Path]) -> FileUpdate:
        """Reload only ``changed`` paths (added, modified or deleted files)."""
        affected: set[Ident] = set()
        for path in sorted(changed):
            old = self._files.get(path)
            if old is not None:
                affected.update(old.objects)
                for ident in old.objects:
                    self._owners[ident].remove(path)
            if path.is_file() and _is_manifest(path, self.root):
                entry = self._reload(path, old)
                self._files[path] = entry
                for ident in entry.objects:
                    owners = self._owners.setdefault(ident, [])
                    owners.append(path)
                    owners.sort()
                affected.update(entry.objects)
            else:
                self._files.pop(path, None)
        by_kind: dict[str, dict[Key, K8sObject | None]] = {}
        for ident in affected:
            holders = self._owners.get(ident) or []
            winner = self._files[holders[0]].objects[ident] if holders else None
            if not holders:
                self._owners.pop(ident, None)
            kind, key = ident[0], (ident[1], ident[2])
            current = self._snapshot.objects.get(kind, {}).get(key)
            if winner is not current:
                by_kind.setdefault(kind, {})[key] = winner
        for kind, changes in by_kind.items():
            self._snapshot = self._snapshot.replace(kind, changes)
        changed_keys = tuple((kind, key) for kind, changes in sorted(by_kind.items())
                             for key in sorted(changes))
        return FileUpdate(self._snapshot, self._errors(), self._stale(), changed_keys)

    def _errors(self) -> tuple[LoadError, ...]:
        errors: list[LoadError] = []
        for path in sorted(self._files):
            errors.extend(self._files[path].errors)
        for ident, owners in self._owners.items():
            for extra in owners[1:]:
                errors.append(LoadError(str(extra), -1,
                                        f"duplicate object, already defined in {owners[0]}",
                                        object=f"{ident[0]}/{ident[1]}/{ident[2]}"))
        return tuple(errors)

    def _stale(self) -> tuple[str, ...]:
        return tuple(str(p) for p, e in sorted(self._files.items()) if e.stale)

    async def watch(self, *, debounce_ms: int = 30, step_ms: int = 5
                    ) -> AsyncIterator[FileUpdate]:
        """The first full load, then one update per burst of changes, forever."""
        from watchfiles import awatch

        yield self.load()
        async for changes in awatch(self.root, debounce=debounce_ms, step=step_ms,
                                    recursive=True, force_polling=False):
            paths = {Path(p) for _, p in changes}
            manifests = {p for p in paths if p.suffix in MANIFEST_SUFFIXES}
            if not manifests:
                continue
            log.info("manifests changed: %s", ", ".join(sorted(str(p) for p in manifests)))
            yield self.apply(manifests)

    def _reload(self, path: Path, old: _Entry | None) -> _Entry:
        old = old or _Entry()
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
            return _Entry(old.objects, list(result_errors), good=True, stale=True)
        for error in result_errors:
            log.warning("manifest error: %s", error)
        return _Entry(fresh, list(result_errors), good=not result_errors)


def _is_manifest(path: Path, root: Path) -> bool:
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    return path.suffix in MANIFEST_SUFFIXES and not any(p.startswith(".") for p in rel.parts)
