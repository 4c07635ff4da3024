"""The lab daemon: one process that holds the lab's moving parts and supervises the rest.

In-process: the control plane (API emulator on 127.0.0.1, saved to disk) and the cluster's
controllers — Deployment controller, scheduler, kubelet with readiness probes, EndpointSlice
controller, kube-proxy's NodePort rules — run as one level-triggered loop: every write to the
store wakes it, it recomputes everything from the store and writes only differences (a write
that changes nothing is not a write, so the loop settles). Supervised child processes (recorded
in the state folder): one ``podway agent`` per node (``--netns`` of the node), the pods, and
``podway controller`` + ``podway engine`` (the engine inside the edge namespace; xDS over a unix
socket in the state folder).

Signals: SIGTERM/SIGINT stop everything in order (controller, engine, agents, pods, then the
store is saved); SIGHUP restarts the control plane from disk (a new emulator, same port).
Started by ``podway lab up`` as ``python -m podway.programs.lab.daemon STATE_DIR``; it prints
progress lines and ``ready`` (or ``error: …``) on stdout, then detaches stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podway.programs.lab import cluster, dns, kubeproxy, network, workloads
from podway.programs.lab.controlplane import ControlPlane
from podway.programs.lab.kubelet import Kubelet
from podway.programs.lab.plan import (
    API_IP,
    API_PORT,
    ENGINE_GROUPS,
    KUBERNETES_IP,
    NPL_RANGE,
    VIP,
    LabPlan,
    NodePlan,
)
from podway.programs.lab.processes import Supervisor
from podway.programs.lab.state import LabState

log = logging.getLogger("podway.programs.lab.daemon")
Obj = dict[str, Any]
GRACE_EXTRA_S = 5  # a kubelet that did not delete its terminating pod by then: do it for it
SEED_LABEL = "lab.podway.io/seed"  # the first three nodes: the seeds' three workers


def node_object(node: NodePlan) -> Obj:
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
              "node-role.kubernetes.io/worker": ""}
    if node.index <= 3:
        labels[SEED_LABEL] = "true"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": labels},
            "spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr]},
            "status": {"addresses": [{"type": "InternalIP", "address": node.ip},
                                     {"type": "Hostname", "address": node.name}],
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}]}}


def controller_available() -> bool:
    return importlib.util.find_spec("podway.programs.controller.main") is not None


class Daemon:
    def __init__(self, state: LabState) -> None:
        self.state = state
        self.plan: LabPlan
        self.plan, port = state.load()
        self.wake = asyncio.Event()
        self.cp = ControlPlane(port=port, store=state.store, changed=self.wake.set,
                               pki=state.pki.ensure(),
                               listen_in=lambda: network.listen_in(self.plan.edge, API_IP,
                                                                   API_PORT))
        self.supervisor = Supervisor(state)
        self.kubelet = Kubelet(plan=self.plan, supervisor=self.supervisor,
                               emu=lambda: self.cp.emu, changed=self.wake.set)
        self.cp.pod_logs = self.kubelet.log_of
        self._rules: dict[str, str] = {}
        self._dns: asyncio.DatagramTransport | None = None  # the cluster DNS (lab.dns)

    async def run(self, say: Any) -> None:
        try:
            say("control plane")
            await self.cp.start()
            self._dns = await dns.serve(
                network.listen_in(self.plan.edge, API_IP, dns.PORT, udp=True),
                lambda: dns.records(self.cp.emu.objects("services"),
                                    self.cp.emu.objects("endpointslices")))
            self._seed()
            await self._reconcile()
            if self.state.chart_marker.exists():  # the chart's pods are Podway here
                say("ready")
                await self._serve()
                return
            kubeconfig = str(self.state.kubeconfig)
            for node in self.plan.nodes:
                say(f"agent on {node.name}")
                await self.supervisor.start(f"agent-{node.name}", [
                    sys.executable, "-m", "podway", "agent", "--node-name", node.name,
                    "--kubeconfig", kubeconfig, "--netns", node.netns, "--port-range",
                    NPL_RANGE, "--metrics-address", "", "--resync", "10",
                    "--npl-key", str(self.state.npl_key)])
            if controller_available():
                say("controller and engine")
                await self.supervisor.start("controller", [
                    sys.executable, "-m", "podway", "controller", "--kubeconfig", kubeconfig,
                    "--xds-listen", f"unix:{self.state.xds_socket}", "--address", VIP,
                    # Only the agents' signed NodePortLocal mappings (docs/security.md).
                    "--npl-key", str(self.state.npl_key), "--npl-port-range", NPL_RANGE,
                    # One replica, restarted by the supervisor: no Lease to wait out.
                    "--leader-elect=false"])
                # Envoy serves the default engine group (every object not choosing one); the
                # kernel and HAProxy engines beside it serve the groups ``lab compare``
                # gives its l4-kernel and l7-haproxy rows (ENGINE_GROUPS).
                await self.supervisor.start("engine", [
                    "ip", "netns", "exec", self.plan.edge, sys.executable, "-m", "podway",
                    "engine", "--xds", f"unix:{self.state.xds_socket}", "--node-id",
                    f"lab-{self.plan.name}-edge", "--state-dir", str(self.state.engine_dir),
                    "--engine-group", "default"])
                for kind, group in ENGINE_GROUPS.items():
                    await self.supervisor.start(f"engine-{kind}", [
                        "ip", "netns", "exec", self.plan.edge, sys.executable, "-m", "podway",
                        "engine", "--engine", kind, "--xds", f"unix:{self.state.xds_socket}",
                        "--node-id", f"lab-{self.plan.name}-edge-{kind}", "--engine-group",
                        group, "--state-dir", str(self.state.engine_dir.with_name(
                            f"engine-{kind}"))])
            say("ready")
            await self._serve()
        finally:
            await self._stop()

    async def _serve(self) -> None:
        """Reconcile on every change until stopped; SIGHUP restarts the control plane."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(
            self._restart_api()))
        while True:
            await self.wake.wait()
            self.wake.clear()
            try:
                await self._reconcile()
            except Exception:  # one bad pass must not stop the lab: log, retry on next
                log.exception("reconcile failed")
                await asyncio.sleep(1)
                self.wake.set()

    def _seed(self) -> None:
        """What a cluster has from the start: its namespaces, its nodes, the ``kubernetes``
        Service in front of the API."""
        emu = self.cp.emu
        for ns in ("default", "kube-system"):
            if emu.get("namespaces", "", ns) is None:
                emu.put("namespaces", {"metadata": {"name": ns}})
        for node in self.plan.nodes:
            if emu.get("nodes", "", node.name) is None:
                emu.put("nodes", node_object(node))
        service, endpoints = cluster.kubernetes_service(API_IP, API_PORT, KUBERNETES_IP)
        if emu.get("services", "default", "kubernetes") is None:
            emu.put("services", service)
        emu.put("endpointslices", endpoints)

    async def _restart_api(self) -> None:
        await self.cp.restart()
        # ``podway lab restart-api`` waits for this count to move.
        marker = self.state.api_restarts
        count = int(marker.read_text()) if marker.exists() else 0
        marker.write_text(str(count + 1))

    def _terminate(self, ns: str, name: str) -> None:
        """Mark a pod terminating; it is deleted when its grace period is over."""
        pod = self.cp.emu.get("pods", ns, name)
        if pod is None or cluster.terminating(pod):
            return
        grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        pod["metadata"]["deletionTimestamp"] = datetime.fromtimestamp(
            time.time() + grace, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self.cp.emu.put("pods", pod)
        asyncio.get_running_loop().call_later(grace + 1, self.wake.set)
        asyncio.get_running_loop().call_later(grace + GRACE_EXTRA_S + 1, self.wake.set)

    async def _stop(self) -> None:
        for what in ("controller", "engine", *(f"engine-{k}" for k in ENGINE_GROUPS)):
            await self.supervisor.stop(what, grace=5.0)
        await asyncio.gather(*(self.supervisor.stop(f"agent-{n.name}")
                               for n in self.plan.nodes))
        await self.kubelet.close()
        await self.supervisor.stop_all()
        if self._dns is not None:
            self._dns.close()
        await self.cp.stop()

    def _workloads(self) -> None:
        """Deployments → ReplicaSets → pods and DaemonSets → pods (``workloads``), then the
        garbage collector: ReplicaSets of deleted Deployments go, pods of deleted owners are
        terminated (gracefully)."""
        emu = self.cp.emu
        pods = emu.objects("pods")
        sets = emu.objects("replicasets")
        deploys = emu.objects("deployments")
        for deploy in deploys:
            mine = [rs for rs in sets if workloads.owned(rs, deploy)]
            for rs in workloads.rollout(deploy, mine, pods):
                emu.put("replicasets", rs)
            for ns, name in workloads.stale_replicasets(deploy, mine, pods):
                emu.delete("replicasets", ns, name)
        alive = {cluster.meta(d).get("uid") for d in deploys}
        for rs in emu.objects("replicasets"):
            if any(r.get("kind") == "Deployment" and r.get("uid") not in alive
                   for r in cluster.meta(rs).get("ownerReferences") or []):
                emu.delete("replicasets", *cluster.key(rs))
        nodes = emu.objects("nodes")
        owners = [("ReplicaSet", rs) for rs in emu.objects("replicasets")] + \
            [("DaemonSet", ds) for ds in emu.objects("daemonsets")]
        for kind, owner in owners:
            if kind == "ReplicaSet":
                create, leaving = workloads.replicaset_pods(owner, pods)
            else:
                create, leaving = workloads.daemonset_pods(owner, nodes, pods)
            for pod in create:
                emu.put("pods", pod)
            for ns, name in leaving:
                self._terminate(ns, name)
        alive = {cluster.meta(o).get("uid") for _, o in owners}
        for pod in emu.objects("pods"):  # pods of deleted owners (or of no ReplicaSet)
            refs = cluster.meta(pod).get("ownerReferences") or []
            if any(r.get("kind") in ("ReplicaSet", "DaemonSet", "Deployment")
                   and (r.get("kind") == "Deployment" or r.get("uid") not in alive)
                   for r in refs):
                self._terminate(*cluster.key(pod))

    def _workload_status(self) -> None:
        emu = self.cp.emu
        pods, nodes = emu.objects("pods"), emu.objects("nodes")
        sets = emu.objects("replicasets")
        for rs in sets:
            status = workloads.replicaset_status(rs, pods)
            if rs.get("status") != status:
                emu.put("replicasets", {**rs, "status": status})
        for deploy in emu.objects("deployments"):
            mine = [rs for rs in sets if workloads.owned(rs, deploy)]
            status = workloads.deployment_status(deploy, mine, pods, deploy.get("status"))
            revision = workloads.deployment_revision(deploy, mine)
            annotations = deploy["metadata"].get("annotations") or {}
            if revision is not None and annotations.get(workloads.REVISION) != revision:
                deploy["metadata"]["annotations"] = {**annotations, workloads.REVISION: revision}
            elif deploy.get("status") == status:
                continue
            emu.put("deployments", {**deploy, "status": status})
        for ds in emu.objects("daemonsets"):
            status = workloads.daemonset_status(ds, nodes, pods)
            if ds.get("status") != status:
                emu.put("daemonsets", {**ds, "status": status})

    async def _reconcile(self) -> None:
        emu = self.cp.emu
        self._workloads()
        now = time.time()
        for pod in emu.objects("pods"):  # terminating pods no kubelet runs, once their grace
            when = cluster.meta(pod).get("deletionTimestamp")  # is over (the kubelet deletes
            running = str(cluster.meta(pod).get("uid")) in self.kubelet.runs  # its own)
            if when and _epoch(when) + (GRACE_EXTRA_S if running else 0) <= now:
                emu.delete("pods", *cluster.key(pod))
        pods = emu.objects("pods")
        nodes = emu.objects("nodes")
        for pod in pods:
            if not (pod.get("spec") or {}).get("nodeName") and not cluster.terminated(pod):
                chosen = cluster.schedule(pod, nodes, pods)
                if chosen is not None:
                    pod["spec"]["nodeName"] = chosen
                    emu.put("pods", pod)
        await self.kubelet.sync(emu.objects("pods"))
        self._workload_status()
        pods = emu.objects("pods")
        services = emu.objects("services")
        wanted: set[tuple[str, str]] = set()
        for svc in services:
            sl = cluster.endpoint_slice(svc, pods)
            if sl is None:
                continue
            wanted.add(cluster.key(sl))
            current = emu.get("endpointslices", *cluster.key(sl))
            if current is None or any(current.get(k) != sl.get(k)
                                      for k in ("ports", "endpoints")):
                emu.put("endpointslices", sl)
        for sl in emu.objects("endpointslices"):
            labels = sl["metadata"].get("labels") or {}
            if labels.get(cluster.MANAGED_BY) == cluster.LAB_SLICES and \
                    cluster.key(sl) not in wanted:
                emu.delete("endpointslices", *cluster.key(sl))
        await program_nodes(self.plan.nodes, services, emu.objects("endpointslices"),
                            self._rules, _write_rules)


async def _write_rules(netns: str, script: str) -> None:
    await asyncio.to_thread(network.in_ns, netns, "nft", "-f", "-", stdin=script)


async def program_nodes(nodes: Sequence[NodePlan], services: list[cluster.Obj],
                        slices: list[cluster.Obj], installed: dict[str, str],
                        write: Callable[[str, str], Awaitable[None]]) -> None:
    """Each node's kube-proxy rules (``kubeproxy.ruleset``), written on every node whose rules
    changed at once, as real kube-proxies do, each on its own node.

    One node after another, the last node learnt that a pod was leaving the sum of the writes
    late. In ``nodeport`` mode a connection from Envoy to a node carries requests for 1 s and
    stays on the pod kube-proxy chose for it; a node that learnt late kept choosing the leaving
    pod, and a request on such a connection failed when the pod exited after its preStop
    (503 "reset reason: connection termination", L7 only: the signature of CI's failure).
    With 0.5 s added to each write, 3 of 3 rollouts lost one such request in turn, 0 of 5 at
    once.
    ``installed`` is updated per node written; the first failure is raised once every write
    has ended (the next pass writes that node again)."""
    async def one(node: NodePlan, script: str) -> None:
        await write(node.netns, script)
        installed[node.name] = script

    changed = [(node, script) for node in nodes
               if installed.get(node.name) != (script := kubeproxy.ruleset(node.name, services,
                                                                          slices))]
    done = await asyncio.gather(*(one(node, script) for node, script in changed),
                                return_exceptions=True)
    for result in done:
        if isinstance(result, BaseException):
            raise result


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def main() -> None:
    state = LabState(Path(sys.argv[1]))
    logging.basicConfig(level=logging.INFO, filename=str(state.logs / "daemon.log"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    state.daemon_pid.write_text(str(os.getpid()))
    detached = False

    def say(line: str) -> None:
        nonlocal detached
        if detached:
            return
        print(line, flush=True)
        if line == "ready" or line.startswith("error:"):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
            detached = True

    async def body() -> None:
        from podway.base.tasks import run_until_signal

        await run_until_signal(Daemon(state).run(say))

    try:
        asyncio.run(body())
    except Exception as exc:
        log.exception("lab daemon failed")
        say(f"error: {exc}")
        raise SystemExit(1) from None
    finally:
        with contextlib.suppress(OSError):
            state.daemon_pid.unlink()


if __name__ == "__main__":
    main()
