"""The controller's live settings file (``--config FILE``), re-read while it runs.

It holds the default backend mode, which can then change without a restart (the per-Service
annotation ``podway.io/backend-mode`` already could), and the engine kind of each engine
group::

    backendMode: clusterip     # clusterip | nodeport | nodeportlocal; absent: --backend-mode
    engineGroups:              # group → the kind of engine that serves it; absent: any kind
      edge: envoy              # envoy (xDS) | haproxy | kernel (the IR: engines.config_feed)
      db: kernel

An engine of another kind than its group names is refused (one line on each side), so a group
is never served half by HAProxy and half by Envoy by mistake. The group of engines without
``--engine-group`` is named ``""`` here (quote it).

In a cluster the file is a ConfigMap key mounted as a volume (kubelet swaps the mounted file
when the ConfigMap changes, within its sync period, about a minute); anywhere else it is a
plain file. Why a file and not a watched ConfigMap: the same mechanism works in and out of a
cluster, needs no knowledge of the controller's own namespace and no extra RBAC, and the
settings stay out of the object snapshot the translator reads.

Invariants: ``load_config`` is the one parser (start and reload agree); a file that is missing
or bad at start is one ``ConfigError`` line; a reload that is missing or bad is one warning per
distinct problem and the last good settings stay (a half-written file never flips the mode).
``follow_config`` polls (size, mtime, inode; content once they held still): no inotify, which
misses kubelet's symlink swap of ``..data`` unless the folder is watched, and polling a small
file is cheap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from podway.base.errors import ConfigError
from podway.translate import BackendMode

log = logging.getLogger(__name__)

KEYS = ("backendMode", "engineGroups")
ENGINE_KINDS = ("envoy", "haproxy", "kernel")


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveConfig:
    """Settings from the file; None: not set there (the flag's value applies)."""

    backend_mode: BackendMode | None = None
    engine_kinds: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def parse_config(text: str, *, path: Path) -> LiveConfig:
    """The settings in ``text`` (the content of ``path``), or one-line ``ConfigError``."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"--config {path}: not YAML{where}") from None
    if data is None:
        return LiveConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of settings "
                          f"({', '.join(KEYS)}), got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in KEYS)
    if unknown:
        raise ConfigError(f"--config {path}: unknown setting {', '.join(unknown)} "
                          f"(known: {', '.join(KEYS)})")
    kinds = _engine_kinds(data.get("engineGroups"), path)
    mode = data.get("backendMode")
    if mode is None:
        return LiveConfig(engine_kinds=kinds)
    try:
        return LiveConfig(backend_mode=BackendMode(str(mode)), engine_kinds=kinds)
    except ValueError:
        raise ConfigError(f"--config {path}: backendMode {mode!r} is not one of "
                          f"{', '.join(m.value for m in BackendMode)}") from None


def _engine_kinds(raw: Any, path: Path) -> Mapping[str, str]:
    """``engineGroups``: group → engine kind."""
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, dict):
        raise ConfigError(f"--config {path}: engineGroups must map group names to an engine "
                          f"kind ({', '.join(ENGINE_KINDS)})")
    out: dict[str, str] = {}
    for group, kind in raw.items():
        if not isinstance(group, str) or kind not in ENGINE_KINDS:
            raise ConfigError(f"--config {path}: engineGroups: {str(group)[:60]!r}: "
                              f"{str(kind)[:40]!r} is not one of {', '.join(ENGINE_KINDS)}")
        out[group.strip()] = str(kind)
    return MappingProxyType(out)


def load_config(path: Path) -> LiveConfig:
    """Read and parse ``path`` (one-line ``ConfigError`` when missing or bad)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--config {path}: not text (UTF-8)") from None
    return parse_config(text, path=path)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


async def follow_config(path: Path, first: LiveConfig, *, poll_s: float = 1.0
                        ) -> AsyncIterator[LiveConfig]:
    """Each new good setting of ``path`` after ``first`` (what start read), forever. A change
    is read once the file's stamp held still for one poll, so a file caught mid-write (say
    truncated to empty, which would read as "unset") is never taken."""
    # Nothing is taken as read: the first still poll reads the file again, so a change made
    # between the start's read and this call is not missed.
    current, problem = first, ""
    stamp: tuple[int, int, int] | None = None
    read: tuple[int, int, int] | bool | None = False
    while True:
        await asyncio.sleep(poll_s)
        now = _stamp(path)
        if now != stamp:
            stamp = now  # moved since the last poll: wait until it holds still
            continue
        if now == read:
            continue
        read = now
        try:
            loaded = load_config(path)
        except ConfigError as exc:
            if str(exc) != problem:
                problem = str(exc)
                log.warning("%s: keeping the settings in use", exc)
            continue
        problem = ""
        if loaded != current:
            current = loaded
            yield loaded
