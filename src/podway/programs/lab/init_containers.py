"""Init containers in the lab's kubelet, as a kubelet runs them: in the order the pod lists
them, each to completion before the next starts, and the app containers only once all have
completed.

- A failed init container (exit status not 0, or one that cannot be made: a missing Secret) is
  run again after a back-off (1 s doubling to 20 s) under the pod's ``restartPolicy``
  ``Always``/``OnFailure``, counting its ``restartCount``; under ``Never`` the pod fails
  (phase ``Failed``), as on a cluster.
- An init container with ``restartPolicy: Always`` is a native sidecar: it is started (and kept
  running, restarted when it exits) and the next one starts at once.
- Status as the kubelet writes it: phase ``Pending`` while initializing, the pod's
  ``Initialized`` condition False (``ContainersNotInitialized``, naming those not done),
  ``status.initContainerStatuses`` (completed: terminated ``Completed``; running; failed:
  waiting ``CrashLoopBackOff`` with the failed run as ``lastState``; not reached yet: waiting
  ``PodInitializing``), so ``kubectl get pods`` shows ``Init:0/2``, ``Init:CrashLoopBackOff``…

How one init container runs (a process in the pod's network namespace, or a container from the
lab's image under the OCI runtime) is the kubelet's: ``initialize`` takes it as ``launch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podway.programs.lab.container_volumes import ContainerError
from podway.programs.lab.podstatus import now

Obj = dict[str, Any]
BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 20.0


def sidecar(spec: Obj) -> bool:
    """A native sidecar: an init container that keeps running beside the app containers."""
    return spec.get("restartPolicy") == "Always"


@dataclass
class InitRun:
    """Where a pod's init containers are: the first ``done`` have completed (a sidecar: has
    started); ``specs[done]`` runs now (``running``), waits to be made (``waiting``: why) or
    backs off after a failure (its ``last`` state)."""
    specs: list[Obj]
    never: bool  # the pod's restartPolicy is Never: a failed init container fails the pod
    done: int = 0
    running: bool = False
    started_at: str = ""
    waiting: str = ""
    failed: bool = False
    restarts: dict[str, int] = field(default_factory=dict)
    last: dict[str, Obj] = field(default_factory=dict)  # name → its last run's terminated state
    task: asyncio.Task[None] | None = None

    @property
    def names(self) -> list[str]:
        return [str(s.get("name", f"init{i}")) for i, s in enumerate(self.specs)]

    @property
    def complete(self) -> bool:
        return self.done >= len(self.specs)

    def pending(self) -> tuple[str, ...]:
        """The init containers not done yet (the ``Initialized`` condition names them)."""
        return tuple(self.names[self.done:])

    def phase(self) -> str:
        return "Failed" if self.failed else "Running" if self.complete else "Pending"


def statuses(run: InitRun) -> list[Obj]:
    """``status.initContainerStatuses`` as the kubelet writes them."""
    out = []
    for index, (spec, name) in enumerate(zip(run.specs, run.names, strict=True)):
        state: Obj
        ready = started = False
        last = run.last.get(name)
        if index < run.done and sidecar(spec):
            state, ready, started, last = last or {"running": {}}, True, True, None
        elif index < run.done:
            state, ready, last = last or {"terminated": {"exitCode": 0, "reason": "Completed"}}, \
                True, None
        elif index > run.done:
            state = {"waiting": {"reason": "PodInitializing"}}
        elif run.running:
            state, started = {"running": {"startedAt": run.started_at}}, True
        elif run.waiting:
            state = {"waiting": {"reason": "CreateContainerConfigError",
                                 "message": run.waiting}}
        elif last is not None and run.failed:
            state, last = last, None
        elif last is not None:
            state = {"waiting": {"reason": "CrashLoopBackOff",
                                 "message": f"back-off restarting failed container {name}"}}
        else:
            state = {"waiting": {"reason": "PodInitializing"}}
        item: Obj = {"name": name, "image": str(spec.get("image", "")), "ready": ready,
                     "restartCount": run.restarts.get(name, 0), "started": started,
                     "state": state}
        if last is not None:
            item["lastState"] = last
        out.append(item)
    return out


async def initialize(run: InitRun, *, launch: Callable[[Obj], Awaitable[int]],
                     start_sidecar: Callable[[Obj], Awaitable[None]],
                     changed: Callable[[], None]) -> bool:
    """Run the init containers in order; True once every one has completed (the app
    containers may start), False when the pod failed (``restartPolicy: Never``). ``launch``
    runs one to its end and gives its exit status (``ContainerError``: it cannot be made)."""
    delay = BACKOFF_START_S
    while not run.complete:
        spec, name = run.specs[run.done], run.names[run.done]
        run.running, run.started_at, run.waiting = True, now(), ""
        changed()
        try:
            if sidecar(spec):
                await start_sidecar(spec)
                run.running, run.last[name] = False, {"running": {"startedAt": now()}}
                run.done += 1
                changed()
                continue
            code = await launch(spec)
        except (ContainerError, OSError) as exc:  # as a kubelet: retried, whatever the policy
            run.running, run.waiting = False, str(exc)
            changed()
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
            continue
        run.running, run.waiting = False, ""
        run.last[name] = {"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error",
            "startedAt": run.started_at, "finishedAt": now()}}
        if code == 0:
            run.done += 1
            delay = BACKOFF_START_S
        elif run.never:
            run.failed = True
            changed()
            return False
        changed()
        if code != 0:
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
            run.restarts[name] = run.restarts.get(name, 0) + 1
    return True


async def run_to_end(argv: list[str], log_path: Path) -> int:
    """Run ``argv`` to its end, its output appended to ``log_path``; its exit status. Cancelled,
    its whole process group is killed first."""
    with open(log_path, "ab") as out:  # noqa: ASYNC230 (a local log file, opened once)
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True)
    try:
        return await proc.wait()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
