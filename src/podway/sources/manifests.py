"""A set of manifest files → one merged snapshot: reading, the duplicate rule, last good objects.

The one place that lists and reads manifest files and decides which copy of an object serves;
``podway run`` (through the live ``FileSource``), ``podway validate`` and ``podway demo`` (through
``load_paths``) all use it, so they can never disagree.

Invariants:

* ``read_manifest`` is pure apart from reading its one file: it is safe in a worker thread, so
  the file source parses off the event loop, one file per job.
* A file that fails to load keeps its *last good* objects and reports the error (``stale``); a
  file never loaded cleanly contributes what did load. One bad file never takes others down.
* Duplicates: the object that was there first keeps serving; the copy in a file added later is
  an error on that later file. When several arrive together (the first load) path order
  decides. When the serving copy goes, the next one in arrival order takes over.
* Cost is O(changed files): the snapshot is patched per kind and the changed (kind, key) pairs
  are returned, so the incremental translator needs no diff. An object whose content did not
  change keeps its identity across reloads (the translator diffs by identity).
* ``LoadLimits.max_objects_total``: a file whose objects would pass it is refused whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from podway.model.base import K8sObject
from podway.model.loader import (
    DEFAULT_LIMITS,
    MANIFEST_SUFFIXES,
    Built,
    LoadError,
    LoadLimits,
    LoadResult,
    Stop,
    clip,
    load_text,
)
from podway.model.snapshot import Key, Snapshot

log = logging.getLogger(__name__)

Ident = tuple[str, str, str]  # kind, namespace, name


@dataclass(frozen=True, slots=True)
class Parsed:
    """What one read of one file gave: its objects (with their document) and its problems."""

    objects: Mapping[Ident, K8sObject]
    documents: Mapping[Ident, int]
    errors: tuple[LoadError, ...] = ()
    warnings: tuple[LoadError, ...] = ()
    size: int = 0  # bytes read


@dataclass(slots=True)
class _Entry:
    parsed: Parsed
    good: bool  # ``parsed.objects`` came from an error-free load
    stale: bool = False  # the latest load failed and the objects are the last good ones
    errors: tuple[LoadError, ...] = ()  # of the latest load (may differ from ``parsed``'s)


def manifest_files(paths: Iterable[Path]) -> list[Path]:
    """Expand folders (recursively, sorted) into the manifest files they hold; files stay.

    Dot files and dot folders *inside* a folder are skipped; the folder's own path may have
    any name (``~/.config/podway`` works)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*")
                                if p.is_file() and p.suffix in MANIFEST_SUFFIXES
                                and not any(part.startswith(".")
                                            for part in p.relative_to(path).parts)))
        else:
            files.append(path)
    return files


def read_manifest(path: Path, *, limits: LoadLimits = DEFAULT_LIMITS,
                  previous: Mapping[Ident, K8sObject] | None = None,
                  stop: Stop | None = None,
                  built: Callable[[bytes], Built | None] | None = None) -> Parsed:
    """Read and parse one file; objects equal to ``previous`` ones keep that identity;
    ``Stopped`` once ``stop`` returns True (``podway.model.loader.load_text``); ``built``:
    the documents of exactly the bytes read, if someone built them already (None: parse)."""
    source = str(path)
    try:
        with path.open("rb") as stream:
            data = stream.read(limits.max_file_bytes + 1)
        if len(data) > limits.max_file_bytes:
            reason = (f"larger than the limit of {limits.max_file_bytes} bytes per file "
                      "(split the file or raise max_file_bytes)")
            log.warning("manifest refused source=%s: %s", source, reason)
            return Parsed({}, {}, (LoadError(source, -1, reason),), size=len(data))
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        message = clip(f"cannot read: {exc}", limits.max_message_chars)
        return Parsed({}, {}, (LoadError(source, -1, message),))
    result = load_text(text, source=source, limits=limits, stop=stop,
                       built=built(data) if built is not None else None)
    previous = previous or {}
    objects: dict[Ident, K8sObject] = {}
    documents: dict[Ident, int] = {}
    for obj, document in zip(result.objects, result.documents, strict=True):
        ident = (obj.KIND, *obj.key)
        if ident in objects:
            result.errors.append(LoadError(
                source, document, f"duplicate object, already defined in {source} "
                f"document {documents[ident]}", object=clip(str(obj.ref))))
            continue
        old = previous.get(ident)
        objects[ident] = old if old is not None and old == obj else obj
        documents[ident] = document
    return Parsed(objects, documents, tuple(result.errors), tuple(result.warnings), len(data))


class ManifestSet:
    """Per-file state plus the merged snapshot, patched in O(changed files)."""

    def __init__(self, limits: LoadLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.files: dict[Path, _Entry] = {}
        self._owners: dict[Ident, list[Path]] = {}  # arrival order: the first one serves
        self._duplicated: set[Ident] = set()  # idents with more than one owner
        self._count = 0  # objects over all files, duplicates included
        self.snapshot = Snapshot()

    def merge(self, changes: Mapping[Path, Parsed | None], *, report: bool = True
              ) -> tuple[tuple[str, Key], ...]:
        """Take new reads (``None``: the file is gone), in path order; return what changed,
        sorted (nothing without ``report``: a first load's caller says "everything", and
        sorting 20,000 keys for nobody took ~30 ms of the cold start)."""
        affected: set[Ident] = set()
        for path in sorted(changes):
            parsed = changes[path]
            old = self.files.get(path)
            new = None if parsed is None else self._entry(path, parsed, old)
            before = old.parsed.objects if old is not None else {}
            after = new.parsed.objects if new is not None else {}
            for ident in before.keys() - after.keys():
                owners = self._owners[ident]
                owners.remove(path)
                if not owners:
                    del self._owners[ident]
                if len(owners) < 2:
                    self._duplicated.discard(ident)
            for ident in after.keys() - before.keys():  # order within one file is moot
                owners = self._owners.setdefault(ident, [])
                owners.append(path)
                if len(owners) > 1:
                    self._duplicated.add(ident)
            self._count += len(after) - len(before)
            affected.update(before)
            affected.update(after)
            if new is None:
                self.files.pop(path, None)
            else:
                self.files[path] = new
        by_kind: dict[str, dict[Key, K8sObject | None]] = {}
        for ident in affected:
            holders = self._owners.get(ident)
            winner = self.files[holders[0]].parsed.objects[ident] if holders else None
            kind, key = ident[0], (ident[1], ident[2])
            if winner is not self.snapshot.objects.get(kind, {}).get(key):
                by_kind.setdefault(kind, {})[key] = winner
        for kind, kind_changes in by_kind.items():
            self.snapshot = self.snapshot.replace(kind, kind_changes)
        if not report:
            return ()
        return tuple((kind, key) for kind, kind_changes in sorted(by_kind.items())
                     for key in sorted(kind_changes))

    def _entry(self, path: Path, parsed: Parsed, old: _Entry | None) -> _Entry:
        """The state of ``path`` after a read: the read itself, or the last good objects."""
        errors = parsed.errors
        size_before = len(old.parsed.objects) if old is not None else 0
        if self._count - size_before + len(parsed.objects) > self.limits.max_objects_total:
            reason = (f"{len(parsed.objects)} objects would pass the limit of "
                      f"{self.limits.max_objects_total} objects in total (raise "
                      "max_objects_total)")
            log.warning("manifest refused source=%s: %s", path, reason)
            errors = (LoadError(str(path), -1, reason),)
            parsed = Parsed({}, {}, errors, parsed.warnings, parsed.size)
        for warning in parsed.warnings:
            log.warning("manifest warning: %s", warning)
        if errors and old is not None and old.good:
            for error in errors:
                log.warning("manifest error (serving last good %s): %s", path.name, error)
            return _Entry(old.parsed, good=True, stale=True, errors=errors)
        for error in errors:
            log.warning("manifest error: %s", error)
        return _Entry(parsed, good=not errors, errors=errors)

    def errors(self) -> tuple[LoadError, ...]:
        """Every file's load errors, then one error per duplicate on the later file."""
        out: list[LoadError] = []
        for path in sorted(self.files):
            out.extend(self.files[path].errors)
        for ident in sorted(self._duplicated):
            owners = self._owners[ident]
            first = owners[0]
            where = f"{first} document {self.files[first].parsed.documents.get(ident, 0)}"
            for extra in owners[1:]:
                out.append(LoadError(
                    str(extra), self.files[extra].parsed.documents.get(ident, -1),
                    f"duplicate object, already defined in {where} (which keeps serving)",
                    object=clip("/".join(p for p in ident if p))))
        return tuple(out)

    def warnings(self) -> tuple[LoadError, ...]:
        return tuple(w for path in sorted(self.files) for w in self.files[path].parsed.warnings)

    def stale(self) -> tuple[str, ...]:
        return tuple(str(p) for p, e in sorted(self.files.items()) if e.stale)


def load_paths(paths: Sequence[Path], *, limits: LoadLimits = DEFAULT_LIMITS) -> LoadResult:
    """Every manifest under ``paths`` once, by the same rules as the live source: what
    ``validate`` and ``demo`` check is what ``run`` would serve."""
    files = list(dict.fromkeys(manifest_files(paths)))
    state = ManifestSet(limits)
    state.merge({path: read_manifest(path, limits=limits) for path in files}, report=False)
    result = LoadResult(errors=list(state.errors()), warnings=list(state.warnings()))
    for path in files:
        entry = state.files.get(path)
        if entry is None:
            continue
        for ident, obj in entry.parsed.objects.items():
            if state.snapshot.objects.get(ident[0], {}).get((ident[1], ident[2])) is obj:
                result.objects.append(obj)
                result.documents.append(entry.parsed.documents[ident])
    return result
