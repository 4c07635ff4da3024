"""Commands run inside a running container of a lab pod, as the kubelet runs an ``exec``
readiness probe or an ``exec`` lifecycle hook: ``<runtime> exec`` of the container (its
namespaces, user, capabilities and root filesystem: the image's binaries, not the host's),
bounded by a timeout after which the command's process is killed.

Without this the lab counted every ``exec`` probe as passing, so a pod such as the chart's
engine turned Ready before its Envoy served, and a rolling update removed the old engine too
early."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from podway.programs.lab import container as ctr
from podway.programs.lab.container_volumes import ContainerError

EXEC_TIMEOUT_S = 1.0  # a probe's default timeoutSeconds


async def exec_in(containers: Path, container_id: str, command: list[str], *,
                  limit_s: float = EXEC_TIMEOUT_S) -> int:
    """The exit status of ``command`` run in container ``container_id`` (of the runtime whose
    state lives under ``containers``); -1 when it did not end within ``limit_s`` seconds or
    could not be run at all."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *ctr.runtime(containers), "exec", container_id, *command,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL)
    except (OSError, ContainerError):
        return -1
    try:
        async with asyncio.timeout(limit_s):
            return await proc.wait()
    except TimeoutError:
        return -1
    finally:  # timed out, or the caller cancelled (a hook cut short at the grace period)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
