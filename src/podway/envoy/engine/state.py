"""The state directory of one engine instance: its sockets, its identity record, its log.

Podway keeps everything an engine needs to outlive it in one private folder per instance, so a
restarted Podway finds the running Envoy again (see ``engine.adopt``) and nothing is left
behind that the next start does not reuse:

* ``xds.sock`` — the xDS server's unix socket for the co-located engine;
* ``admin.sock`` — Envoy's admin interface (mode 0600);
* ``envoy.json`` — who the running Envoy is: pid, start time, bootstrap hash;
* ``bootstrap.json`` and ``envoy.log`` (Envoy's stderr, a file so that it outlives Podway);
* ``podway.lock`` — held (``flock``) by the live Podway; the kernel drops it when that process
  dies, even by ``kill -9``, so a lock that can be taken means nobody owns the folder.

Invariants: the folder is a directory (not a link) owned by the running user with no group or
other access, and so is the default base above it (a chosen parent must at least not be
writable by others, unless sticky like /tmp); at most one Podway holds an instance at a time.
An *ephemeral* folder (``open_state(None)``: tests, embedding) lives under the base as
``.tmp-*``; a later start removes those whose lock is free, and a clean stop removes it. A
persistent one keeps only what adoption needs after a crash, and is emptied on a clean stop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from podway.base.errors import ConfigError

# A unix socket path must fit sun_path (108 bytes with the NUL).
MAX_SOCKET_PATH = 107
_FILES = ("xds.sock", "admin.sock", "envoy.json", "bootstrap.json", "envoy.log", "podway.lock")


def default_base() -> Path:
    """``$XDG_RUNTIME_DIR/podway``, else ``/run/podway`` for root, else ``/tmp/podway-<uid>``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and Path(runtime).is_absolute():
        return Path(runtime) / "podway"
    if os.geteuid() == 0:
        return Path("/run/podway")
    return Path("/tmp") / f"podway-{os.geteuid()}"  # not $TMPDIR: socket paths must stay short


def instance_dir(state_dir: Path | None, instance: str) -> Path:
    """``--state-dir`` if given, else the instance's folder under the default base."""
    if state_dir is not None:
        return state_dir.absolute()
    if not instance or "/" in instance or instance.startswith(".") or len(instance) > 40:
        raise ConfigError(f"--instance {instance!r} must be a plain name (no '/', no leading "
                          "dot, at most 40 characters)")
    return default_base() / instance


@dataclass(frozen=True, slots=True)
class StateDir:
    """Paths of one instance's folder (the folder exists and is locked while in use)."""

    path: Path
    ephemeral: bool = False

    @property
    def xds_socket(self) -> Path:
        return self.path / "xds.sock"

    @property
    def admin_socket(self) -> Path:
        return self.path / "admin.sock"

    @property
    def identity(self) -> Path:
        return self.path / "envoy.json"

    @property
    def bootstrap(self) -> Path:
        return self.path / "bootstrap.json"

    @property
    def log(self) -> Path:
        return self.path / "envoy.log"

    @property
    def lock(self) -> Path:
        return self.path / "podway.lock"


@contextlib.contextmanager
def open_state(path: Path | None, *, shared: bool = False) -> Iterator[StateDir]:
    """Create (0700) and lock an instance's folder; on exit remove what was made in it.

    ``path`` None: a fresh ephemeral folder under the default base (stale ones are swept).
    ``shared``: ``path`` is a pod's volume, shared only with the pod's own containers (a
    Kubernetes emptyDir is owned by root with mode 0777, whatever user the engine runs as): it
    must be a real folder, but its owner and mode are taken as they are.
    """
    try:
        state = _make(path, shared=shared)
    except OSError as exc:
        raise ConfigError(f"cannot create the state folder {path or default_base()}: "
                          f"{exc.strerror or exc}; pick another --state-dir") from None
    with _locked(state):
        yield state


def _make(path: Path | None, *, shared: bool = False) -> StateDir:
    if path is None:
        base = default_base()
        _private_dir(base, parents=True)
        _sweep_ephemeral(base)
        state = StateDir(Path(tempfile.mkdtemp(prefix=".tmp-", dir=base)), ephemeral=True)
    elif shared:
        state = StateDir(path)
        if not path.is_dir() or path.is_symlink():
            raise ConfigError(f"{path} must be a folder (--state-dir-shared takes the pod's "
                              "volume as it is; it is a link, a file or missing)")
    else:
        state = StateDir(path)
        _private_dir(path.parent, parents=True, strict=path.parent == default_base())
        _private_dir(path, parents=False)
    if len(str(state.admin_socket)) > MAX_SOCKET_PATH - 2:
        if state.ephemeral:
            shutil.rmtree(state.path, ignore_errors=True)
        raise ConfigError(f"state folder {state.path} is too long for a unix socket path "
                          f"(at most {MAX_SOCKET_PATH - 12} characters): pick a shorter "
                          "--state-dir")
    return state


@contextlib.contextmanager
def _locked(state: StateDir) -> Iterator[None]:
    """Hold the folder's lock (one Podway per folder); on exit clean the folder."""
    fd = os.open(state.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"another Podway is running with state folder {state.path}: "
                              "stop it, or pass another --instance/--state-dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield
        finally:
            clean(state)
    finally:
        os.close(fd)  # the lock goes with it


def clean(state: StateDir) -> None:
    """Remove what Podway made in the folder (and an ephemeral folder itself)."""
    if state.ephemeral:
        shutil.rmtree(state.path, ignore_errors=True)
        return
    for name in _FILES:
        with contextlib.suppress(FileNotFoundError):
            (state.path / name).unlink()
    with contextlib.suppress(OSError):
        state.path.rmdir()  # only if nothing else was put there


def _private_dir(path: Path, *, parents: bool, strict: bool = True) -> None:
    """Make ``path`` (0700) or check that it is a real folder of ours with no group/other
    access. ``strict`` False (a user-chosen parent): only check it is not writable by others."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=parents)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{path} must be a folder (it is a link or a file)")
    if not strict:
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise ConfigError(f"{path} is writable by other users: put the state folder "
                              "elsewhere")
        return
    if info.st_uid != os.geteuid():
        raise ConfigError(f"{path} belongs to uid {info.st_uid}, not to this user "
                          f"({os.geteuid()}): remove it or pick another --state-dir")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)  # ours, too open: close it before anything secret goes in


def _sweep_ephemeral(base: Path) -> None:
    """Remove ephemeral folders nobody holds (their Podway died without cleaning up). A folder
    younger than a minute is left alone: its Podway may not have taken its lock yet."""
    for folder in base.glob(".tmp-*"):
        try:
            if _age_s(folder) < 60:
                continue
            fd = os.open(folder / "podway.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # alive
        finally:
            os.close(fd)
        _stop_orphan(StateDir(folder, ephemeral=True))
        shutil.rmtree(folder, ignore_errors=True)


def _stop_orphan(state: StateDir) -> None:
    """An ephemeral folder's Envoy dies with its Podway; if one is somehow left, end it."""
    from podway.envoy.engine.adopt import read_identity, terminate_stale

    record = read_identity(state)
    if record is not None:
        terminate_stale(record)


def _age_s(path: Path) -> float:
    return time.time() - path.stat().st_mtime
