"""Folder of manifests → snapshots, live: the standalone-mode source.

The rules for reading files and for duplicates live in ``podway.sources.manifests``; this module
is the shell that watches the folder, parses off the event loop and publishes updates.

Invariants:

* The folder path is made absolute and normalised once (``..`` resolved against real folders,
  the folder's own name kept, so a symlinked folder stays a symlink that can be swapped). Event
  paths from the watcher are compared with that one form: a relative ``--manifests`` works
  exactly like an absolute one.
* Parsing happens in worker threads, one job per file. A small edit is published as soon as
  its file is parsed, without waiting for a big file still being parsed: files under
  ``SMALL_FILE`` bytes have threads of their own (a lane), so they never queue behind big files
  that occupy every parse thread; a newer event for a file supersedes its parse in flight.
  After a big file is dropped, memory is given back. When ``watch`` ends (a stop signal),
  parses in flight stop at their next document: the interpreter's exit waits for worker
  threads, and a big file's parse took seconds.
* Watching uses inotify (``watchfiles``) with a short debounce; bursts of writes coalesce. The
  watch starts *before* the first load, so nothing written in between is missed.
* The folder itself may go away. Deleted or renamed away: the last good objects keep serving
  (a vanished folder is most likely a deploy in progress), the update says so as an error on
  the folder and lists every file as stale, and the folder is looked for again every
  ``missing_poll_s``. Re-created or swapped in by a rename: the watch restarts on the new folder
  and every file is reloaded. A folder present but emptied means no objects.
* Events name paths, not always manifests: a folder moved in or out gets one event for the
  folder, and a Kubernetes ConfigMap volume swaps its ``..data`` symlink (events only on
  dot-paths). Any event on a path that is not a plain manifest re-lists the folder and reloads
  what appeared or vanished; an event on a ``..`` path reloads every file.
* Writers should write a temporary file and rename it into place (docs/run.md). For those who
  do not, files are read once their size and mtime hold still for a couple of milliseconds
  (bounded); a file still caught mid-write fails to parse and keeps its last good objects.
* A watch that fails (the watcher task raised or ended while the folder is still there) raises
  ``SourceError`` out of ``watch`` at once; bad input never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podway.base.errors import PodwayError
from podway.base.tasks import cancel_and_wait
from podway.model.loader import (
    DEFAULT_LIMITS,
    MANIFEST_SUFFIXES,
    Built,
    LoadError,
    LoadLimits,
    Stopped,
)
from podway.sources.base import SourceUpdate
from podway.sources.manifests import (
    ManifestSet,
    Parsed,
    load_paths,
    manifest_files,
    read_manifest,
)
from podway.sources.prefetch import Prefetch

__all__ = ["FileSource", "SourceError", "load_paths", "manifest_files", "normalise_root",
           "read_manifest", "wait_stable"]

log = logging.getLogger(__name__)

_BIG_FILE = 1 << 20  # bytes: dropping a file this large gives memory back to the system
#: Files smaller than this are parsed in their own lane of threads (milliseconds each), so an
#: edit of one never waits for big files to be parsed (seconds each at 10,000s of objects).
SMALL_FILE = 256 * 1024


class SourceError(PodwayError):
    """The source cannot go on (its watch failed); the message says what and where."""


@dataclass(slots=True)
class _Live:
    """What one run of ``watch`` works with: the loop, the parse threads, parses in flight,
    the watcher tasks and their queue."""

    loop: asyncio.AbstractEventLoop
    executor: Executor  # big files
    small: Executor  # files under SMALL_FILE bytes
    events: asyncio.Queue[set[Path] | _WatchEnded]
    debounce_ms: int
    step_ms: int
    pending: dict[Path, asyncio.Future[Parsed | None]] = field(default_factory=dict)
    watchers: list[asyncio.Task[None]] = field(default_factory=list)
    # Set when ``watch`` ends: a parse still running stops at its next document (a worker
    # thread cannot be cancelled, and the interpreter's exit waits for it).
    stopping: threading.Event = field(default_factory=threading.Event)


class _WatchEnded:
    """Queue marker: the watcher stopped (its folder went, or it failed)."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


def normalise_root(path: Path) -> Path:
    """Absolute, with ``..`` resolved through real folders, but the folder's own name kept
    (a symlinked folder stays the link, so swapping the link is seen)."""
    path = Path(os.path.abspath(path))
    if path.name in ("", ".", ".."):
        return Path(os.path.realpath(path))
    return Path(os.path.realpath(path.parent)) / path.name


class FileSource:
    """A folder of manifests, loaded and then watched."""

    def __init__(self, root: Path, *, limits: LoadLimits = DEFAULT_LIMITS,
                 parse_workers: int = 1, prefetch: Prefetch | None = None) -> None:
        self.root = normalise_root(root)
        # The first load's big files, parsed by a process started with the command
        # (``podway.sources.prefetch``); closed once the first load is done.
        self.prefetch = prefetch
        self.limits = limits
        # Threads for big files. One: parses hold the GIL, so more threads do not parse faster,
        # they only make the small files' lane and the event loop wait longer for it.
        self.parse_workers = parse_workers
        self._set = ManifestSet(limits)
        self._missing = False  # the folder is gone; the last good objects keep serving

    # -- synchronous core (also what tests drive) -----------------------------------------

    def load(self) -> SourceUpdate:
        """(Re)load every file under the folder and return the merged view."""
        paths = set(manifest_files([self.root])) | set(self._set.files)
        return self._publish({p: self._read(p) for p in paths}, report=False)

    def apply(self, changed: set[Path]) -> SourceUpdate:
        """Reload ``changed`` paths (added, modified or deleted files), parsing here."""
        return self._publish({p: self._read(p) for p in changed})

    def to_reload(self, events: set[Path]) -> set[Path]:
        """The files to (re)load for a batch of event paths (see the module docstring)."""
        events = {Path(os.path.normpath(p)) for p in events}
        manifests = {p for p in events if p.suffix in MANIFEST_SUFFIXES}
        plain = {p for p in manifests if _is_manifest(p, self.root)}
        if plain == events:
            return plain
        present = set(manifest_files([self.root])) if self.root.is_dir() else set()
        known = set(self._set.files)
        reload = plain | (present ^ known)  # moved, copied or deleted in bulk
        if any(part.startswith("..") for p in events for part in _relative_parts(p, self.root)):
            reload |= present  # a ConfigMap swap: any file may have new content
        return reload

    def _read(self, path: Path) -> Parsed | None:
        return self._reader(path, threading.Event())()

    def _publish(self, changes: dict[Path, Parsed | None], *, report: bool = True
                 ) -> SourceUpdate:
        """The merged view after ``changes``; its ``changed`` keys only with ``report`` (else
        None: everything, as a first load says)."""
        merged = self._set.merge(changes, report=report)
        changed = merged if report else None
        errors = self._set.errors()
        stale = self._set.stale()
        if self._missing:
            errors = (LoadError(str(self.root), -1, "the manifests folder is gone; serving the "
                                f"last good objects of {len(self._set.files)} files until it "
                                "is back"), *errors)
            stale = tuple(str(p) for p in sorted(self._set.files))
        return SourceUpdate(self._set.snapshot, errors, stale, changed, self._set.warnings())

    # -- the live shell ---------------------------------------------------------------------

    async def watch(self, *, debounce_ms: int = 30, step_ms: int = 5,
                    missing_poll_s: float = 0.25) -> AsyncIterator[SourceUpdate]:
        """The first full load, then one update per parsed batch of changes, until cancelled."""
        live = _Live(asyncio.get_running_loop(),
                     ThreadPoolExecutor(max(1, self.parse_workers),
                                        thread_name_prefix="podway-parse"),
                     ThreadPoolExecutor(2, thread_name_prefix="podway-parse-small"),
                     asyncio.Queue(), debounce_ms, step_ms)
        self._start_watchers(live)
        chores: set[asyncio.Future[None]] = set()
        getter: asyncio.Task[set[Path] | _WatchEnded] | None = None
        # awatch registers its inotify watches before its first await: one turn of the loop
        # and the folder is watched, so the load below misses nothing.
        await asyncio.sleep(0)
        self._root_id = _identity(self.root)
        try:
            yield self._publish(await self._first_load(live), report=False)
            while True:
                if getter is None:
                    getter = asyncio.create_task(live.events.get(), name="file-source-events")
                waits: set[asyncio.Future[Any]] = {getter, *live.pending.values()}
                done, _ = await asyncio.wait(
                    waits, return_when=asyncio.FIRST_COMPLETED,
                    timeout=missing_poll_s if self._missing else None)
                gone: dict[Path, Parsed | None] = {}
                if getter in done:
                    item, getter = getter.result(), None
                    gone = await self._on_events(self._drain(item, live.events), live)
                elif self._missing and self.root.is_dir():
                    log.warning("manifests folder %s is back; reloading every file", self.root)
                    self._missing, self._announce = False, True
                    gone = self._restart(live)
                ready = {p: f.result() for p, f in live.pending.items() if f.done()}
                for path in ready:
                    del live.pending[path]
                if not (ready or gone or self._announce):
                    continue
                self._announce = False
                dropped = sum(self._size(p) for p, r in (ready | gone).items() if r is None)
                update = self._publish(ready | gone)
                if dropped >= _BIG_FILE:  # the objects are freed now: trim while we yield
                    chore = live.loop.run_in_executor(live.executor, _release_memory)
                    chores.add(chore)
                    chore.add_done_callback(chores.discard)
                yield update
        finally:
            live.stopping.set()
            self._prefetched()
            for future in live.pending.values():
                future.cancel()
            watchers = list(live.watchers)
            self._stop(live)
            if getter is not None:
                getter.cancel()
            await cancel_and_wait(*watchers)
            live.executor.shutdown(wait=False, cancel_futures=True)
            live.small.shutdown(wait=False, cancel_futures=True)

    async def _first_load(self, live: _Live) -> dict[Path, Parsed | None]:
        began = time.perf_counter()
        self._schedule(manifest_files([self.root]), live)
        first = dict(zip(live.pending, await asyncio.gather(*live.pending.values()),
                         strict=True))
        live.pending.clear()
        log.info("first load of %s: %d files parsed in %.2f s", self.root, len(first),
                 time.perf_counter() - began)
        self._prefetched()
        return first

    _root_id: tuple[int, int] | None = None
    _announce = False  # publish even with no file change (the folder just went)

    def _size(self, path: Path) -> int:
        entry = self._set.files.get(path)
        return entry.parsed.size if entry is not None else 0

    @staticmethod
    def _drain(item: set[Path] | _WatchEnded,
               events: asyncio.Queue[set[Path] | _WatchEnded]) -> set[Path] | _WatchEnded:
        """``item`` plus whatever piled up meanwhile; a watcher's end wins."""
        paths = item
        while not events.empty() and not isinstance(paths, _WatchEnded):
            more = events.get_nowait()
            paths = more if isinstance(more, _WatchEnded) else paths | more
        return paths

    async def _on_events(self, paths: set[Path] | _WatchEnded, live: _Live
                         ) -> dict[Path, Parsed | None]:
        """Start parses for what the events touched; return the files known to be gone."""
        if self._missing:
            return {}
        reload = set() if isinstance(paths, _WatchEnded) else self.to_reload(paths)
        if reload:
            await wait_stable(reload)
        identity = _identity(self.root)
        if identity is None:
            log.warning("manifests folder %s is gone: serving the last good objects of %d "
                        "files until it is back", self.root, len(self._set.files))
            self._missing = self._announce = True
            self._stop(live)
            for future in live.pending.values():
                future.cancel()
            live.pending.clear()
            return {}
        if identity != self._root_id:
            log.warning("manifests folder %s was replaced (re-created or renamed in); "
                        "reloading every file", self.root)
            return self._restart(live)
        if isinstance(paths, _WatchEnded):
            raise SourceError(f"watching {self.root} failed: "
                              f"{paths.error or 'the watcher stopped'}") from paths.error
        if reload:
            log.info("manifests changed: %s", ", ".join(sorted(str(p) for p in reload)))
        return self._schedule(reload, live)

    def _restart(self, live: _Live) -> dict[Path, Parsed | None]:
        """Watch the folder now at the path (before listing it) and reload everything."""
        self._stop(live)
        while not live.events.empty():  # events of the old folder name nothing there now
            live.events.get_nowait()
        self._start_watchers(live)
        self._root_id = _identity(self.root)
        present = set(manifest_files([self.root]))
        return self._schedule(present | set(self._set.files), live)

    def _schedule(self, paths: Iterable[Path], live: _Live) -> dict[Path, Parsed | None]:
        """A parse job per present file (superseding one in flight); the gone ones."""
        gone: dict[Path, Parsed | None] = {}
        for path in paths:
            old = live.pending.pop(path, None)
            if old is not None:
                old.cancel()  # superseded: its result, if it still comes, is dropped
            if path.is_file() and _is_manifest(path, self.root):
                lane = live.small if _size_of(path) < SMALL_FILE else live.executor
                live.pending[path] = live.loop.run_in_executor(
                    lane, self._reader(path, live.stopping))
            else:
                gone[path] = None
        return gone

    def _reader(self, path: Path, stopping: threading.Event) -> Callable[[], Parsed | None]:
        """A job for a worker thread: it touches no state of the source; it ends early, with
        ``None`` (nobody reads it), once ``stopping`` is set."""
        old = self._set.files.get(path)
        previous = old.parsed.objects if old is not None else None
        root, limits, prefetch = self.root, self.limits, self.prefetch

        def built(data: bytes) -> Built | None:
            return prefetch.take(path, data, stopping.is_set) if prefetch is not None \
                else None

        def job() -> Parsed | None:
            if stopping.is_set() or not (path.is_file() and _is_manifest(path, root)):
                return None
            try:
                return read_manifest(path, limits=limits, previous=previous,
                                     stop=stopping.is_set, built=built)
            except Stopped:
                log.info("stopped parsing %s: the source is stopping", path)
                return None

        return job

    def _start_watchers(self, live: _Live) -> None:
        """The folder (recursive) and its parent (only events naming the folder itself)."""
        from watchfiles import awatch

        root, events = self.root, live.events

        async def pump(path: Path, *, recursive: bool) -> None:
            error: BaseException | None = None
            try:
                async for changes in awatch(
                        path, debounce=live.debounce_ms, step=live.step_ms, recursive=recursive,
                        force_polling=False,
                        watch_filter=None if recursive else lambda _c, p: Path(p) == root):
                    events.put_nowait({Path(p) for _, p in changes})
            except Exception as exc:  # the folder's: handed to the consumer, which raises
                error = exc
            if recursive:
                events.put_nowait(_WatchEnded(error))
            elif error is not None:  # the parent's watch only speeds up noticing a swap
                log.warning("cannot watch %s (%s): a folder swapped in by rename is noticed "
                            "only through the folder's own events", path, error)

        live.watchers.append(asyncio.create_task(pump(root, recursive=True),
                                                 name="file-source-watch"))
        if root.parent != root:
            live.watchers.append(asyncio.create_task(pump(root.parent, recursive=False),
                                                     name="file-source-watch-parent"))

    def _prefetched(self) -> None:
        """The first load is done (or the watch ends): the prefetch process is not needed."""
        prefetch, self.prefetch = self.prefetch, None
        if prefetch is not None:
            log.debug("prefetch: %d big files parsed beside the start", prefetch.used)
            prefetch.close()

    @staticmethod
    def _stop(live: _Live) -> None:
        for task in live.watchers:
            task.cancel()
        live.watchers.clear()


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # gone meanwhile: its job finds out (a quick one)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder at ``path`` (through symlinks), None when not a folder."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if path.is_dir() else None


def _release_memory() -> None:
    """Give the memory of a dropped big file back to the system: its objects are freed by
    reference counting, but glibc keeps the pages until trimmed. (No ``gc.collect()``: a full
    collection holds the GIL, and with it the event loop, for as long as it takes.)"""
    name = ctypes.util.find_library("c")
    if name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).malloc_trim(0)


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
