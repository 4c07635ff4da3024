"""The lab's kubelet for every node: a scheduled Pod becomes a network namespace on its node's
bridge with an address from the node's CIDR, running ``podway.programs.lab.pod`` (echo on every
declared container port) with the pod's identity; readiness probes decide ``ContainersReady``,
and ``Ready`` also needs every readiness gate's condition True (``pod_conditions``: conditions
other writers set, like the controller's ``podway.io/lb-ready``, are kept, never dropped).

Invariants: a pod keeps its namespace and IP for its whole life (a restart of its process, after
it dies, keeps both, counts ``restartCount`` and clears Ready until the probe passes again);
probes run from the pod's node (its namespace, one thread per node), as the kubelet does:
``httpGet`` passes on 200-399, ``tcpSocket`` on a connection, no probe on the process being up.
Status is written only when it changes.

A pod whose image is the lab's image archive (``lab up --image``) runs its containers from it
under an OCI runtime (runc) instead (``podway.programs.lab.container``), one supervised process
per container; it is up when every container has started, and a container that cannot be made
(a missing Secret, ``runAsNonRoot`` with uid 0…) leaves the pod waiting with the reason in its
status.

Init containers (``podway.programs.lab.init_containers``) run first, in order, each to
completion (a process pod: its command in the pod's namespace; an image pod: under runc); the
app containers start only once they all have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from podway.base.tasks import cancel_and_wait
from podway.kube.emulator import KubeEmulator
from podway.programs.agent.netns import single_thread
from podway.programs.lab import bundles as bundles_of
from podway.programs.lab import container as ctr
from podway.programs.lab import container_volumes as vol
from podway.programs.lab import network, podenv
from podway.programs.lab.cluster import key, meta, terminated, terminating
from podway.programs.lab.container_exec import EXEC_TIMEOUT_S, exec_in
from podway.programs.lab.init_containers import InitRun, initialize, run_to_end
from podway.programs.lab.init_containers import statuses as init_statuses
from podway.programs.lab.plan import LabPlan, NodePlan
from podway.programs.lab.podstatus import (
    container_ports,
    now,
    pod_conditions,
    pre_stop,
    probe_once,
    readiness_probe,
)
from podway.programs.lab.processes import Supervisor

log = logging.getLogger("podway.programs.lab.kubelet")
Obj = dict[str, Any]
LOG_LIMIT = 1 << 20  # kubectl logs reads at most the last MiB of a pod's output


@dataclass
class PodRun:
    uid: str
    namespace: str
    name: str
    node: NodePlan
    slot: int
    netns: str
    ip: str
    ports: list[tuple[int, str]]
    probe: Obj | None
    started_at: str
    containers: list[str] = field(default_factory=list)  # container names run under crun
    started: set[str] = field(default_factory=set)  # those running now
    waiting: str = ""  # why the pod's containers cannot start (CreateContainerConfigError)
    up: bool = False  # the process listens
    ready: bool = False
    restarts: int = 0
    prober: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: asyncio.Task[None] | None = None  # the pod is terminating (``_terminate``)
    init: InitRun | None = None  # its init containers (``init_containers``), if it has any
    sidecars: list[str] = field(default_factory=list)  # native sidecars started (supervised)

    @property
    def what(self) -> str:
        return f"pod-{self.namespace}-{self.name}"


class Kubelet:
    def __init__(self, *, plan: LabPlan, supervisor: Supervisor,
                 emu: Callable[[], KubeEmulator], changed: Callable[[], None]) -> None:
        self.plan, self.supervisor, self.emu, self.changed = plan, supervisor, emu, changed
        self.runs: dict[str, PodRun] = {}
        self._threads: dict[str, ThreadPoolExecutor] = {}
        self._image: ctr.Image | None = None
        self._image_lock = asyncio.Lock()

    async def image(self) -> ctr.Image | None:
        """The lab's image, unpacked on first use; None when the lab has none."""
        archive = self.supervisor.state.image_archive
        if archive is None:
            return None
        async with self._image_lock:
            if self._image is None:
                self._image = await asyncio.to_thread(
                    ctr.unpack, archive, self.supervisor.state.images / "podway")
        return self._image

    async def _from_image(self, pod: Obj) -> ctr.Image | None:
        if self.supervisor.state.image_archive is None:
            return None
        try:
            tag = ctr.archive_tag(self.supervisor.state.image_archive)
        except (OSError, vol.ContainerError) as exc:
            log.warning("lab image: %s", exc)
            return None
        images = [str(c.get("image", "")) for c in
                  (pod.get("spec") or {}).get("containers") or []]
        probe = ctr.Image(name="podway", tag=tag, rootfs=Path(), config={})
        if not images or not all(probe.serves(i) for i in images):
            return None
        return await self.image()

    def _thread(self, node: NodePlan) -> ThreadPoolExecutor:
        if node.name not in self._threads:
            self._threads[node.name] = single_thread(netns=node.netns, name="lab-probe")
        return self._threads[node.name]

    async def sync(self, pods: list[Obj]) -> None:
        """Make the running pods match the scheduled ones, then publish their status."""
        wanted = {str(meta(p)["uid"]): p for p in pods
                  if (p.get("spec") or {}).get("nodeName") and not terminated(p)}
        for uid in [u for u in self.runs if u not in wanted]:
            await self._remove(self.runs[uid])
        for uid, pod in wanted.items():
            if uid not in self.runs:
                node_name = pod["spec"]["nodeName"]
                try:
                    node = self.plan.node(node_name)
                except KeyError:
                    continue  # scheduled onto a node the lab does not have
                await self._add(uid, pod, node)
            elif self.runs[uid].waiting and self._image is not None and self._initialized(uid):
                # As a kubelet retries: the missing Secret or ConfigMap may exist now.
                await self._start_containers(self.runs[uid], pod, self._image)
        for uid, pod in wanted.items():
            run = self.runs.get(uid)
            if run is not None and terminating(pod) and run.stopping is None:
                run.stopping = asyncio.create_task(self._terminate(run, pod),
                                                   name=f"lab-stop-{run.what}")
            if run is not None:
                self._publish(run, pod)

    async def _add(self, uid: str, pod: Obj, node: NodePlan) -> None:
        ns, name = key(pod)
        if (pod.get("spec") or {}).get("hostNetwork"):  # the node's namespace and address
            slot, netns, ip = -1, node.netns, node.ip
        else:
            used = {r.slot for r in self.runs.values() if r.node.name == node.name}
            slot = next(s for s in range(len(used) + 1) if s not in used)
            netns = self.plan.pod_netns(node, slot)
            ip = await asyncio.to_thread(network.add_pod, self.plan, node, slot, netns)
        run = PodRun(uid=uid, namespace=ns, name=name, node=node, slot=slot, netns=netns, ip=ip,
                     ports=container_ports(pod), probe=readiness_probe(pod),
                     started_at=now())
        self.runs[uid] = run
        image = await self._from_image(pod)
        specs = list((pod.get("spec") or {}).get("initContainers") or [])
        if specs:  # the app containers start once these have completed (``_initialize``)
            run.init = InitRun(specs=specs,
                               never=(pod.get("spec") or {}).get("restartPolicy") == "Never")
            run.init.task = asyncio.create_task(self._initialize(run, pod, image),
                                                name=f"lab-init-{run.what}")
            return
        await self._start_app(run, pod, image)

    def _initialized(self, uid: str) -> bool:
        init = self.runs[uid].init
        return init is None or init.complete

    async def _initialize(self, run: PodRun, pod: Obj, image: ctr.Image | None) -> None:
        assert run.init is not None
        launch = partial(self._init_image, run, pod, image) if image is not None \
            else partial(self._init_process, run)
        if await initialize(run.init, launch=launch, changed=self.changed,
                            start_sidecar=partial(self._sidecar, run, pod, image)):
            await self._start_app(run, pod, image)

    async def _start_app(self, run: PodRun, pod: Obj, image: ctr.Image | None) -> None:
        """The app containers: from the image under the OCI runtime, or the lab's process."""
        ns, name, netns, node = run.namespace, run.name, run.netns, run.node
        if image is not None:
            await self._start_containers(run, pod, image)
            run.prober = asyncio.create_task(self._probe(run), name=f"lab-probe-{run.what}")
            return
        argv = ["ip", "netns", "exec", netns, sys.executable, "-m", "podway.programs.lab.pod",
                "--pod", name, "--namespace", ns, "--node", node.name,
                *(f"{port}/{proto}" for port, proto in run.ports)]

        def line(text: str) -> None:
            if text == "ready" and not run.up:
                run.up = True
                run.wake.set()
                self.changed()

        def exited(code: int) -> None:
            if run.up:
                run.restarts += 1
            run.up = run.ready = False
            self.changed()

        await self.supervisor.start(run.what, argv, on_line=line, on_exit=exited)
        run.prober = asyncio.create_task(self._probe(run), name=f"lab-probe-{run.what}")

    def _objects(self, pod: Obj) -> dict[tuple[str, str], Obj]:
        """The Secrets and ConfigMaps of the pod's namespace, by (kind, name)."""
        ns = str(meta(pod).get("namespace", "default"))
        out: dict[tuple[str, str], Obj] = {}
        for kind, plural in (("secret", "secrets"), ("configmap", "configmaps")):
            for obj in self.emu().objects(plural):
                if meta(obj).get("namespace") == ns:
                    out[(kind, str(meta(obj)["name"]))] = obj
        return out

    def _token(self, pod: Obj) -> str | None:
        """A token of the pod's ServiceAccount, signed by the lab's API (None: not mounted)."""
        ns, name = str(meta(pod).get("namespace", "default")), podenv.service_account(pod)
        if not podenv.automount(pod, self.emu().get("serviceaccounts", ns, name)):
            return None
        return self.emu().issue_token(ns, name, node=str(pod["spec"].get("nodeName", "")))

    async def _bundles(self, run: PodRun, pod: Obj, image: ctr.Image,
                       specs: list[Obj] | None = None) -> list[tuple[str, Path]]:
        """The OCI bundles of the pod's containers (``specs``: of these instead); raises
        ``ContainerError``/``OSError`` when one cannot be made."""
        state = self.supervisor.state
        ctr.runtime(state.containers)  # none installed: the pod waits with the reason
        place = bundles_of.PodPlace(netns=run.netns, pod_ip=run.ip, host_ip=run.node.ip,
                                    folder=state.containers / run.uid)
        return await asyncio.to_thread(
            bundles_of.make, pod, image, self._objects(pod), place, token=self._token(pod),
            ca=state.pki.ca_cert.read_bytes(), specs=specs)

    def _crun_script(self, cid: str, bundle: Path) -> list[str]:
        crun = ctr.runtime(self.supervisor.state.containers)
        # A container left by the last start (its crun killed) would block the name.
        return ["sh", "-c", f'{shlex.join([*crun, "delete", "-f", cid])} >/dev/null 2>&1; '
                f'exec {shlex.join([*crun, "run", "--bundle", str(bundle), cid])}']

    async def _init_process(self, run: PodRun, spec: Obj) -> int:
        """One init container of a process pod: its command and args in the pod's network
        namespace (lab pods have no image: none given, there is nothing to run)."""
        argv = [str(a) for a in [*(spec.get("command") or []), *(spec.get("args") or [])]]
        if not argv:
            return 0
        return await run_to_end(["ip", "netns", "exec", run.netns, *argv],
                                self.supervisor.log_path(f"{run.what}-{spec.get('name')}"))

    async def _init_image(self, run: PodRun, pod: Obj, image: ctr.Image, spec: Obj) -> int:
        """One init container from the image, under the OCI runtime, to its end."""
        [(name, bundle)] = await self._bundles(run, pod, image, [spec])
        cid = f"{run.uid}-{name}"
        try:
            return await run_to_end(self._crun_script(cid, bundle),
                                    self.supervisor.log_path(f"{run.what}-{name}"))
        finally:
            await asyncio.to_thread(
                subprocess.run, [*ctr.runtime(self.supervisor.state.containers), "delete",
                                 "-f", cid], capture_output=True, check=False)

    async def _sidecar(self, run: PodRun, pod: Obj, image: ctr.Image | None,
                       spec: Obj) -> None:
        """A native sidecar (an init container with ``restartPolicy: Always``): supervised,
        restarted when it exits, stopped with the pod."""
        name = str(spec.get("name"))
        if image is not None:
            [(name, bundle)] = await self._bundles(run, pod, image, [spec])
            argv = self._crun_script(f"{run.uid}-{name}", bundle)
        else:
            argv = [str(a) for a in [*(spec.get("command") or []), *(spec.get("args") or [])]]
            if not argv:
                return
            argv = ["ip", "netns", "exec", run.netns, *argv]
        run.sidecars.append(name)
        await self.supervisor.start(f"{run.what}-{name}", argv)

    async def _start_containers(self, run: PodRun, pod: Obj, image: ctr.Image) -> None:
        try:
            bundles = await self._bundles(run, pod, image)
        except (OSError, vol.ContainerError) as exc:
            if run.waiting != str(exc):
                run.waiting = str(exc)
                log.warning("%s: %s", run.what, exc)
                self.changed()
            return
        run.waiting = ""
        run.containers = [name for name, _ in bundles]
        for name, bundle in bundles:
            script = self._crun_script(f"{run.uid}-{name}", bundle)

            def started(name: str = name) -> None:
                run.started.add(name)
                if run.started >= set(run.containers) and not run.up:
                    run.up = True
                    run.wake.set()
                    self.changed()

            def exited(code: int, name: str = name) -> None:
                run.started.discard(name)
                if run.up:
                    run.restarts += 1
                run.up = run.ready = False
                self.changed()

            await self.supervisor.start(f"{run.what}-{name}", script,
                                        on_start=started, on_exit=exited)

    async def _probe(self, run: PodRun) -> None:
        probe = run.probe
        initial = float((probe or {}).get("initialDelaySeconds", 0))
        period = float((probe or {}).get("periodSeconds", 10))
        if initial:
            await asyncio.sleep(initial)
        while True:
            if not run.up:
                run.wake.clear()
                await run.wake.wait()
            ok = run.up and (probe is None or await self._check(run, probe))
            if ok != run.ready:
                run.ready = ok
                self.changed()
            run.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period if probe else 3600):
                    await run.wake.wait()

    async def _terminate(self, run: PodRun, pod: Obj) -> None:
        """Stop a terminating pod as the kubelet does: its ``preStop`` hook first (bounded by
        the grace period; the pod serves meanwhile), then SIGTERM, SIGKILL once the grace
        period (``metadata.deletionGracePeriodSeconds``, else the spec's
        ``terminationGracePeriodSeconds``, default 30) is over, plus the 2 s the kubelet adds
        when the hook used it all; then the pod object is deleted (the kubelet's final
        delete)."""
        loop = asyncio.get_running_loop()
        if run.init is not None and run.init.task is not None:  # no app containers after it
            await cancel_and_wait(run.init.task)
        grace = float(meta(pod).get("deletionGracePeriodSeconds")
                      or (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        deadline = loop.time() + grace
        hook = pre_stop(pod)
        if hook is not None:
            try:
                async with asyncio.timeout(grace):
                    await self._hook(run, hook)
            except TimeoutError:
                deadline += 2.0
            except Exception:  # a failing hook is logged; termination goes on (as upstream)
                log.exception("preStop hook of %s failed", run.what)
        run.up = run.ready = False
        self.changed()
        # The app containers (an image pod's run under the OCI runtime, a process pod's is
        # ``run.what``) get SIGTERM together and the rest of the grace period; native sidecars
        # only after they exited, in reverse order, as the kubelet stops them.
        apps = [run.what, *(f"{run.what}-{name}" for name in run.containers)]
        await asyncio.gather(*(self.supervisor.terminate(
            what, grace=max(0.1, deadline - loop.time())) for what in apps))
        for name in reversed(run.sidecars):
            await self.supervisor.terminate(f"{run.what}-{name}",
                                            grace=max(0.1, deadline - loop.time()))
        for what in [*apps, *(f"{run.what}-{name}" for name in run.sidecars)]:
            await self.supervisor.stop(what, grace=0.1)  # SIGKILL if the grace is over
        current = self.emu().get("pods", run.namespace, run.name)
        if current is not None and str(meta(current).get("uid")) == run.uid:
            self.emu().delete("pods", run.namespace, run.name)

    async def _hook(self, run: PodRun, hook: Obj) -> None:
        """One lifecycle handler: ``sleep``, ``httpGet`` (to the pod, from its node) or
        ``exec`` (the command in the pod's network namespace: lab pods have no image)."""
        if "sleep" in hook:
            await asyncio.sleep(float((hook["sleep"] or {}).get("seconds", 0)))
        elif "httpGet" in hook:
            await asyncio.get_running_loop().run_in_executor(
                self._thread(run.node), probe_once, run.ip, {"httpGet": hook["httpGet"]},
                run.ports)
        elif "exec" in hook:
            command = [str(c) for c in (hook["exec"] or {}).get("command") or []]
            if command and run.containers:  # in the container: the image's binaries
                await exec_in(self.supervisor.state.containers,
                              f"{run.uid}-{run.containers[0]}", command, limit_s=3600.0)
            elif command:
                proc = await asyncio.create_subprocess_exec(
                    "ip", "netns", "exec", run.netns, *command,
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
                try:
                    await proc.wait()
                finally:  # cut short at the grace period: the hook's whole group goes
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()

    async def _check(self, run: PodRun, probe: Obj) -> bool:
        """One readiness check: ``exec`` in the container, else from the node (probe_once)."""
        if "exec" in probe and run.containers:
            command = [str(c) for c in probe["exec"].get("command") or []]
            return await exec_in(self.supervisor.state.containers,
                                 f"{run.uid}-{probe.get('container')}", command,
                                 limit_s=float(probe.get("timeoutSeconds", EXEC_TIMEOUT_S))) == 0
        return await asyncio.get_running_loop().run_in_executor(
            self._thread(run.node), probe_once, run.ip, probe, run.ports)

    async def _remove(self, run: PodRun) -> None:
        self.runs.pop(run.uid, None)
        if run.stopping is not None and run.stopping is not asyncio.current_task():
            await cancel_and_wait(run.stopping)
        if run.init is not None and run.init.task is not None:
            await cancel_and_wait(run.init.task)  # kills the init container running now
        if run.prober is not None:
            await cancel_and_wait(run.prober)
        await self.supervisor.stop(run.what, grace=2.0)
        for name in [*run.containers, *run.sidecars]:
            await self.supervisor.stop(f"{run.what}-{name}", grace=2.0)
        if run.netns != run.node.netns:  # a host-network pod leaves its node's alone
            await asyncio.to_thread(network.remove_ns, run.netns)
        folder = self.supervisor.state.containers / run.uid
        if folder.exists():
            with contextlib.suppress(vol.ContainerError):
                crun = ctr.runtime(self.supervisor.state.containers)
                for name in [*run.containers, *run.sidecars]:
                    await asyncio.to_thread(
                        subprocess.run, [*crun, "delete", "-f", f"{run.uid}-{name}"],
                        capture_output=True, check=False)
            await asyncio.to_thread(ctr.release, folder)

    def _publish(self, run: PodRun, listed: Obj) -> None:
        # Read the pod again: awaits since the list may have let an agent annotate it.
        pod = self.emu().get("pods", run.namespace, run.name)
        if pod is None or str(meta(pod).get("uid")) != run.uid or listed is None:
            return
        old = pod.get("status") or {}
        containers = (pod.get("spec") or {}).get("containers") or [{"name": "main"}]
        init = run.init
        waiting = {"reason": "PodInitializing"} if init is not None and not init.complete \
            else {"reason": "CreateContainerConfigError", "message": run.waiting} \
            if run.waiting else {"reason": "ContainerCreating"}
        status = {
            "phase": "Running" if init is None else init.phase(), "hostIP": run.node.ip,
            "hostIPs": [{"ip": run.node.ip}], "podIP": run.ip, "podIPs": [{"ip": run.ip}],
            "startTime": run.started_at,
            "conditions": pod_conditions(pod, containers_ready=run.ready,
                                         uninitialized=init.pending() if init else ()),
            "containerStatuses": [{
                "name": c.get("name", "main"), "image": c.get("image", "podway-echo"),
                "ready": run.ready, "restartCount": run.restarts, "started": run.up,
                "state": {"running": {"startedAt": run.started_at}} if run.up
                else {"waiting": waiting}}
                for c in containers]}
        if init is not None:
            status["initContainerStatuses"] = init_statuses(init)
        if status != old:
            self.emu().put("pods", {**pod, "status": status})

    def log_of(self, namespace: str, name: str, container: str | None = None) -> str | None:
        """``kubectl logs``: what the pod's process wrote (stdout and stderr, every run of it,
        the last MiB); None for a pod this kubelet does not run. Lab pods are one process, so
        every container name reads the same output."""
        run = next((r for r in self.runs.values()
                    if (r.namespace, r.name) == (namespace, name)), None)
        if run is None:
            return None
        path = self.supervisor.log_path(run.what)
        try:
            with open(path, "rb") as log_file:
                log_file.seek(max(0, path.stat().st_size - LOG_LIMIT))
                return log_file.read().decode(errors="replace")
        except OSError:
            return ""

    async def close(self) -> None:
        for run in list(self.runs.values()):
            await self._remove(run)
        for pool in self._threads.values():
            pool.shutdown(wait=False)
