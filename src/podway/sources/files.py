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
  save) coalesce into one snapshot. The watch starts *before* the first load, so nothing written
  in between is missed.
* Events name paths, not always manifests: a folder moved in or out gets one event for the
  folder, and a Kubernetes ConfigMap volume swaps its ``..data`` symlink (events only on
  dot-paths) while the visible ``*.yaml`` links stay unchanged. Any event on a path that is not a
  plain manifest therefore re-lists the folder and reloads what appeared or vanished; an event on
  a ``..`` path (the kubelet's atomic writer) reloads every file, whose content may have changed
  behind an unchanged link.
* Writers should write a temporary file and rename it into place (docs/run.md). For those who
  do not, files are read only once their size and mtime hold still for a couple of
  milliseconds (bounded); a file still caught mid-write fails to parse and keeps its last good
  objects until its next event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from podway.model.base import K8sObject
from podway.model.loader import MANIFEST_SUFFIXES, LoadError, load_text, manifest_files
from podway.model.snapshot import Key, Snapshot
from podway.sources.base import SourceUpdate

log = logging.getLogger(__name__)

Ident = tuple[str, str, str]  # kind, namespace, name


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

    def load(self) -> SourceUpdate:
        """(Re)load every file under the folder and return the merged view."""
        present = set(manifest_files([self.root]))
        update = self.apply(present | set(self._files))
        return SourceUpdate(update.snapshot, update.errors, update.stale_files, None)

    def apply(self, changed: set[Path]) -> SourceUpdate:
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
        return SourceUpdate(self._snapshot, self._errors(), self._stale(), changed_keys)

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
                    ) -> AsyncIterator[SourceUpdate]:
        """The first full load, then one update per burst of changes, forever."""
        from watchfiles import awatch

        batches: asyncio.Queue[set[Path]] = asyncio.Queue()

        async def pump() -> None:
            async for changes in awatch(self.root, debounce=debounce_ms, step=step_ms,
                                        recursive=True, force_polling=False):
                batches.put_nowait({Path(p) for _, p in changes})

        watcher = asyncio.create_task(pump(), name="file-source-watch")
        # awatch registers its inotify watches synchronously, before its first await: one turn
        # of the loop and the folder is watched, so the load below misses nothing.
        await asyncio.sleep(0)
        try:
            yield self.load()
            while True:
                paths = await batches.get()
                while not batches.empty():  # coalesce what piled up meanwhile
                    paths |= batches.get_nowait()
                reload = self.to_reload(paths)
                if not reload:
                    continue
                log.info("manifests changed: %s", ", ".join(sorted(str(p) for p in reload)))
                await wait_stable(reload)
                yield self.apply(reload)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    def to_reload(self, events: set[Path]) -> set[Path]:
        """The files to (re)load for a batch of event paths (see the module docstring)."""
        manifests = {p for p in events if p.suffix in MANIFEST_SUFFIXES}
        plain = {p for p in manifests if _is_manifest(p, self.root)}
        if plain == events:
            return plain
        present = set(manifest_files([self.root]))
        known = set(self._files)
        reload = plain | (present ^ known)  # moved, copied or deleted in bulk
        if any(part.startswith("..") for p in events for part in _relative_parts(p, self.root)):
            reload |= present  # a ConfigMap swap: any file may have new content
        return reload

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


def _signature(paths: Iterable[Path]) -> list[tuple[int, int] | None]:
    out: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            out.append(None)
        else:
            out.append((st.st_size, st.st_mtime_ns))
    return out


async def wait_stable(paths: Iterable[Path], *, step_s: float = 0.002, limit_s: float = 0.2
                      ) -> bool:
    """Until the size and mtime of every path held still for ``step_s``; False if they were
    still changing after ``limit_s`` (then the caller reads them anyway)."""
    ordered = sorted(paths)
    before = _signature(ordered)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        await asyncio.sleep(step_s)
        after = _signature(ordered)
        if after == before:
            return True
        if loop.time() >= deadline:
            return False
        before = after


def _relative_parts(path: Path, root: Path) -> tuple[str, ...]:
    try:
        return path.relative_to(root).parts
    except ValueError:
        return ()


def _is_manifest(path: Path, root: Path) -> bool:
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    return path.suffix in MANIFEST_SUFFIXES and not any(p.startswith(".") for p in rel.parts)
