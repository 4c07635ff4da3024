"""The first load's big files parsed in a second process, beside ``podway run``'s own start.

Why: a cold ``podway run`` spends its first second importing its modules and then parses the
folder; at 10,000 routes the YAML of one 20,000-object file alone took ~0.8 CPU-s, all on one
core while the other idled (docs/performance.md, "Cold start"). ``Prefetch`` starts a small
worker process (this module run as a script: the interpreter, PyYAML and
``podway.model.yaml_fast``, nothing else) at the very start of the command; it builds the
documents of each big manifest while the main process imports, and hands them over through a
pipe, marshalled: ``marshal`` writes plain values ~6x faster than ``pickle``, whose memo of
every object cost the worker ~0.13 CPU-s for a 20,000-object file (a frame with a value marshal
cannot write, such as a timestamp, goes pickled). The main process still reads every file
itself, checks every limit and types every object; it only skips building the YAML of a file
whose bytes are exactly those the worker parsed (a digest of them travels with the documents).

Invariants:

* What the worker hands over is only ever a shortcut: a file it skipped (small, with anchors,
  not valid YAML, changed since: its digest differs), a worker that died or said nothing is
  parsed by the main process as before, with the same values and errors.
* Only plain data crosses the pipe (what ``FastSafeLoader`` builds: dicts, lists, strings,
  numbers, timestamps), from our own child (the same interpreter, so the same marshal format),
  over a pipe nobody else holds.
* The worker dies with ``podway run`` (parent-death signal) and is stopped by ``close``; it
  exits on its own once every big file is sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

#: Files from this size on are parsed by the worker: the file source's big files
#: (``podway.sources.files.SMALL_FILE``; smaller ones take milliseconds).
MIN_BYTES = 256 * 1024
#: Larger files are left to the main process, which refuses them (``LoadLimits``' default).
MAX_BYTES = 32 * 1024 * 1024
#: How long the main process waits for the worker with nothing from it before it parses the
#: file itself: a worker alive but stuck must not stall the first load forever.
PATIENCE_S = 30.0
_HEADER = struct.Struct("!Qc")  # body size, its format (_MARSHAL or _PICKLE)
_MARSHAL, _PICKLE = b"m", b"p"
_SUFFIXES = (".yaml", ".yml", ".json")  # podway.model.loader.MANIFEST_SUFFIXES
Built = tuple[list[Any], int | None]


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class Prefetch:
    """The worker process and what it handed over so far (see the module docstring)."""

    def __init__(self, root: Path, *, min_bytes: int = MIN_BYTES) -> None:
        self.root = root
        self.min_bytes = min_bytes
        self._cond = threading.Condition()
        self._plan: frozenset[str] | None = None
        self._built: dict[str, tuple[bytes, Built | None]] = {}
        self._ended = False
        self._heard = time.monotonic()  # the worker's start or last frame
        self.patience_s = PATIENCE_S
        self.used = 0  # files whose documents were taken from the worker
        # Here, not at the top: the worker runs this file as a script, with the stdlib only.
        from podway.base.children import die_with_parent, isolation_flags

        try:
            self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, *isolation_flags(), "-P", __file__, os.fspath(root),
                 str(min_bytes)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                # only prctl between fork and exec (``die_with_parent``: resolved here)
                preexec_fn=die_with_parent(signal.SIGKILL), close_fds=True)  # noqa: PLW1509
        except OSError:
            self._process, self._ended = None, True
            return
        threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True,
                         name="podway-prefetch").start()

    def take(self, path: Path, data: bytes, stop: Callable[[], bool] = lambda: False
             ) -> Built | None:
        """The documents the worker built from exactly ``data`` (the bytes of ``path`` the
        caller read), waiting for them if the worker is on it; None otherwise."""
        if len(data) < self.min_bytes:
            return None  # not the worker's (and no wait for its start)
        key = os.path.realpath(path)  # the worker names files so too
        def waiting() -> bool:
            return (not self._ended and not stop()
                    and time.monotonic() - self._heard < self.patience_s)

        with self._cond:
            while self._plan is None and waiting():
                self._cond.wait(0.05)
            if self._plan is None or key not in self._plan:
                return None
            while key not in self._built and waiting():
                self._cond.wait(0.05)
            entry = self._built.pop(key, None)
        if entry is None or entry[1] is None or entry[0] != digest(data):
            return None
        self.used += 1
        return entry[1]

    def close(self) -> None:
        """Stop the worker (if it still runs) and reap it."""
        with self._cond:
            self._ended = True
            self._built.clear()
            self._cond.notify_all()
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait()  # its pipe is at its end now: the reader closes it

    def _read(self, stream: IO[bytes] | None) -> None:
        try:
            while stream is not None and (frame := read_frame(stream)) is not None:
                with self._cond:
                    self._heard = time.monotonic()
                    if frame[0] == "plan":
                        self._plan = frozenset(frame[1])
                    elif not self._ended:
                        self._built[frame[0]] = (frame[1], frame[2])
                    self._cond.notify_all()
        except Exception:  # a broken worker is only a shortcut missed
            pass
        finally:
            if stream is not None:
                stream.close()
            with self._cond:
                self._ended = True
                self._cond.notify_all()


# -- the worker: this file run as a script ----------------------------------------------------

def _files(root: Path, min_bytes: int) -> list[tuple[int, Path]]:
    """The big manifests under ``root`` (as the file source lists them), largest first."""
    found: list[tuple[int, Path]] = []
    for path in root.rglob("*"):
        if path.suffix not in _SUFFIXES or any(
                p.startswith(".") for p in path.relative_to(root).parts):
            continue
        try:
            if path.is_file() and min_bytes <= (size := path.stat().st_size) <= MAX_BYTES:
                found.append((size, path))
        except OSError:
            continue
    return sorted(found, key=lambda f: (-f[0], f[1]))


def read_frame(stream: IO[bytes]) -> tuple[Any, ...] | None:
    """The next frame the worker wrote to ``stream`` (``_send``); None at its end."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    size, form = _HEADER.unpack(head)
    body = stream.read(size)
    frame: tuple[Any, ...] = marshal.loads(body) if form == _MARSHAL else pickle.loads(body)
    return frame


def _send(out: IO[bytes], frame: tuple[Any, ...]) -> None:
    try:
        body, form = marshal.dumps(frame), _MARSHAL
    except ValueError:  # a value marshal does not write (a timestamp, a date)
        body, form = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL), _PICKLE
    out.write(_HEADER.pack(len(body), form) + body)
    out.flush()


def _build(data: bytes, load: Callable[[str], Built]) -> Built | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "&" in text:  # anchors: the main process checks aliases before building
        return None
    try:
        return load(text)
    except Exception:  # YAML errors, too deep: the main process reports them
        return None


def worker(root: Path, min_bytes: int, out: IO[bytes],
           load: Callable[[str], Built]) -> None:
    files = [(size, os.path.realpath(path)) for size, path in _files(root, min_bytes)]
    _send(out, ("plan", [key for _, key in files]))
    for _, key in files:
        try:
            with open(key, "rb") as file:
                data = file.read()
        except OSError:
            _send(out, (key, b"", None))
            continue
        _send(out, (key, digest(data), _build(data, load)))


def _load_yaml_fast() -> Callable[[str], Built]:
    """``podway.model.loader.load_documents`` without importing the model package (pydantic
    and every kind): ``podway.model.yaml_fast`` needs PyYAML only, so it is loaded by path."""
    import importlib.util

    where = Path(__file__).resolve().parent.parent / "model" / "yaml_fast.py"
    spec = importlib.util.spec_from_file_location("_podway_yaml_fast", where)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    loader_class = module.FastSafeLoader

    def load(text: str) -> Built:
        loader = loader_class(text)
        try:
            documents = []
            while loader.check_data():
                documents.append(loader.get_data())
            return documents, loader.deepest
        finally:
            loader.dispose()

    return load


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        worker(Path(sys.argv[1]), int(sys.argv[2]), sys.stdout.buffer, _load_yaml_fast())
