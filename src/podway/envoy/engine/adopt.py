"""Finding the Envoy a previous Podway left running, so that a restart adopts it.

Envoy outlives its supervisor (own session, no parent-death signal), and the supervisor writes
who it started to ``envoy.json`` in the state folder. A new Podway adopts that Envoy only when
all of these hold, else it starts its own:

* the pid is alive and its start time (``/proc/<pid>/stat``) is the one recorded — a recycled
  pid is never mistaken for our Envoy, and a pidfd taken before the check pins the process;
* the recorded bootstrap hash (bootstrap, binary and command line) equals the one this Podway
  would start with — a changed flag means a new Envoy (the old one is drained and stopped);
* its admin socket answers.

A pidfd also lets us wait for a process that is not our child (``loop.add_reader``) and signal
it without racing pid reuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from podway.envoy.engine.state import StateDir

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """What ``envoy.json`` records about the running Envoy."""

    pid: int
    started: int  # start time in clock ticks since boot (/proc/<pid>/stat field 22)
    config_hash: str  # sha256 of bootstrap + binary + arguments


def config_hash(*, bootstrap: bytes, args: list[str]) -> str:
    digest = hashlib.sha256(bootstrap)
    digest.update(json.dumps(args).encode())
    return digest.hexdigest()


def start_time(pid: int) -> int | None:
    """The process's start time (ticks since boot), or None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ')'
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def write_identity(state: StateDir, record: Identity) -> None:
    tmp = state.identity.with_name(".envoy.json.tmp")
    tmp.write_text(json.dumps(asdict(record)), encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, state.identity)


def read_identity(state: StateDir) -> Identity | None:
    try:
        data = json.loads(state.identity.read_text(encoding="utf-8"))
        return Identity(pid=int(data["pid"]), started=int(data["started"]),
                        config_hash=str(data["config_hash"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def open_pidfd(record: Identity) -> int | None:
    """A pidfd for the recorded process if it is still that very process, else None."""
    try:
        fd = os.pidfd_open(record.pid)
    except (ProcessLookupError, OSError):
        return None
    if start_time(record.pid) != record.started:  # checked after the pidfd pins the process
        os.close(fd)
        return None
    return fd


async def wait_pidfd(fd: int) -> None:
    """Until the process behind ``fd`` has exited."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, exited)
    try:
        await done
    finally:
        loop.remove_reader(fd)


def terminate_stale(record: Identity) -> None:
    """SIGKILL the recorded process if it is still that process (ephemeral-folder sweep)."""
    fd = open_pidfd(record)
    if fd is None:
        return
    try:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        log.warning("stopped an orphaned Envoy pid=%s", record.pid)
    finally:
        os.close(fd)
