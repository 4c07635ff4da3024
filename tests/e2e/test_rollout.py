"""Every pod of a Deployment replaced, the way Kubernetes does it, under L4 and L7 load through a
real Envoy with the default active checks: not one request or connection fails.

Standalone mode, file edits that follow the EndpointSlice states of a rollout: the old pods turn
``terminating`` (still ``serving``) while the new ones are listed not ready and not listening yet;
the new ones start listening and turn ready one by one; the old ones leave after their grace
period. Full replacement (all at once, as the lab's Deployment controller and ``kubectl rollout
restart`` with ``maxSurge: 100%`` do) and a rolling update (one pod at a time), in the
``clusterip`` and ``nodeportlocal`` modes (``nodeport`` members are nodes: a rollout does not
move them; the lab test covers that mode end to end). Pods are loopback addresses 127.0.0.N.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from podway.envoy.engine.bootstrap import EnvoyStats
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve
from podway.translate.core.options import BackendMode

from .harness import Stack, free_port, get, make_stack, started_or_failed

pytestmark = pytest.mark.e2e


@dataclass
class Pod:
    name: str
    address: str
    ready: bool = False
    terminating: bool = False
    task: asyncio.Task[None] | None = None


@dataclass
class Load:
    """One client in a loop; every failure kept (what and when)."""

    ask: Callable[[], Awaitable[str]]
    answers: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(100_000):  # bounded
            if self.stop.is_set():
                return
            try:
                self.answers.append(await self.ask())
            except (OSError, TimeoutError, ValueError, KeyError,
                    asyncio.IncompleteReadError) as exc:
                self.failures.append(f"{loop.time():.3f} {exc!r}")
            await asyncio.sleep(0.001)


class Cluster:
    """The manifests of one Service (L4 LoadBalancer port and L7 through an Ingress) whose
    pods come and go, in one backend mode."""

    def __init__(self, stack: Stack, mode: BackendMode) -> None:
        self.stack, self.mode = stack, mode
        self.port = free_port()  # the pods' port (every pod listens on its own address)
        self.lb_port = free_port()
        self.pods: list[Pod] = []
        self._next = 2

    def add(self) -> Pod:
        pod = Pod(f"pod-{self._next}", f"127.0.0.{self._next}")
        self._next += 1
        self.pods.append(pod)
        return pod

    async def start(self, pod: Pod) -> None:
        started = asyncio.Event()
        pod.task = asyncio.create_task(serve(
            EchoOptions(address=pod.address, port=self.port,
                        identity=Identity(name=pod.name)), started=started), name=pod.name)
        await started_or_failed(pod.task, started)

    async def stop(self, pod: Pod) -> None:
        if pod.task is not None:
            pod.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pod.task

    async def publish(self) -> None:
        """Write the Service, pods and slice as they are now; wait until they are applied."""
        generation = self.stack.state.generation if self.stack.tasks else 0
        self.stack.write("web.yaml", self.manifests())
        if self.stack.tasks:
            await self.stack.applied(generation + 1)

    def _npl(self, pod: Pod) -> str:
        """The pod's NodePortLocal annotation: its own address stands in for its node's."""
        return json.dumps([{"podPort": self.port, "nodeIP": pod.address,
                            "nodePort": self.port, "protocol": "tcp", "ipFamily": "IPv4"}])

    def manifests(self) -> str:
        endpoints = "\n".join(
            f"- addresses: [{p.address}]\n"
            f"  conditions: {{ready: {str(p.ready and not p.terminating).lower()}, "
            f"serving: {str(p.ready).lower()}, terminating: {str(p.terminating).lower()}}}\n"
            f"  targetRef: {{kind: Pod, namespace: default, name: {p.name}}}"
            for p in self.pods)
        pods = "".join(f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {p.name}
  namespace: default
  labels: {{app: web}}
  annotations:
    nodeportlocal.antrea.io: '{self._npl(p)}'
spec: {{nodeName: node-1, containers: [{{name: web, image: web}}]}}
status: {{podIP: {p.address}}}
""" for p in self.pods)
        return f"""apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  annotations: {{nodeportlocal.antrea.io/enabled: "true"}}
spec:
  type: LoadBalancer
  selector: {{app: web}}
  ports: [{{name: web, port: {self.lb_port}, targetPort: {self.port}, protocol: TCP}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: web, namespace: default}}
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {{service: {{name: web, port: {{number: {self.lb_port}}}}}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: web, port: {self.port}, protocol: TCP}}]
endpoints:
{endpoints or '[]'}
{pods}"""


async def _http(port: int) -> str:
    status, body = await get(port, "shop.test", "/")
    if status != 200:
        raise ValueError(f"status {status}")
    return str(body["name"])


async def _tcp(port: int) -> str:
    """One new connection through the L4 listener (HTTP inside, read by the pod itself)."""
    status, body = await get(port, "l4.test", "/")
    if status != 200:
        raise ValueError(f"status {status}")
    return str(body["name"])


async def _replace(cluster: Cluster, old: list[Pod], *, grace_s: float) -> None:
    """Replace ``old`` as Kubernetes does: terminating + new pods listed not ready, then the new
    pods listen and turn ready one by one, then the old ones stop after ``grace_s``."""
    for pod in old:
        pod.terminating = True
    new = [cluster.add() for _ in old]
    await cluster.publish()
    for pod in new:
        await asyncio.sleep(0.15)  # a pod's process starts a moment after it is listed
        await cluster.start(pod)
        await asyncio.sleep(0.1)  # then its readiness probe passes
        pod.ready = True
        await cluster.publish()
    await asyncio.sleep(grace_s)
    for pod in old:  # the grace period is over: the process stops, then the pod is deleted
        await cluster.stop(pod)
    for pod in old:
        cluster.pods.remove(pod)
    await cluster.publish()


@pytest.mark.parametrize("engine", ["envoy", "haproxy"])
@pytest.mark.parametrize("mode", [BackendMode.CLUSTERIP, BackendMode.NODEPORTLOCAL])
@pytest.mark.parametrize("rolling", [False, True], ids=["all-at-once", "one-by-one"])
async def test_replacing_every_pod_under_load_loses_nothing(tmp_path: object, mode: BackendMode,
                                                            rolling: bool, engine: str) -> None:
    """L4 connections and L7 requests in a loop while every pod is replaced (all at once, or
    one at a time): none fails, and the new pods answer in the end. Through Envoy (fallback
    members at priority 1) and HAProxy (fallback members as backup servers)."""
    root = tmp_path / "manifests"  # type: ignore[operator]
    root.mkdir()
    stack = await make_stack(root, mode=mode, envoy_stats=EnvoyStats.BOUNDED,  # the default
                             engine_kind=engine)
    cluster = Cluster(stack, mode)
    loads: list[Load] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for _ in range(3):
            pod = cluster.add()
            await cluster.start(pod)
            pod.ready = True
        await cluster.publish()
        await stack.start()
        loads = [Load(lambda: _tcp(cluster.lb_port)), Load(lambda: _http(stack.http_port))]
        for load in loads:
            async with asyncio.timeout(20):
                while True:
                    with contextlib.suppress(OSError, ValueError, KeyError, TimeoutError):
                        await load.ask()
                        break
                    await asyncio.sleep(0.05)
        tasks = [asyncio.create_task(load.run(), name="load") for load in loads]
        await asyncio.sleep(0.5)
        old = list(cluster.pods)
        if rolling:
            for pod in old:
                await _replace(cluster, [pod], grace_s=0.5)
        else:
            await _replace(cluster, old, grace_s=1.5)
        # The old pods are stopped and gone: wait for ten more answers from each loop (not a
        # fixed time: on a loaded machine half a second held fewer than ten).
        done = [len(load.answers) + len(load.failures) for load in loads]
        async with asyncio.timeout(20):
            while any(len(load.answers) + len(load.failures) < n + 10  # noqa: ASYNC110
                      for load, n in zip(loads, done, strict=True)):
                await asyncio.sleep(0.05)
    finally:
        for load in loads:
            load.stop.set()
        for task in tasks:
            await task
        for pod in cluster.pods:
            await cluster.stop(pod)
        await stack.stop()
    new = {p.name for p in cluster.pods}
    for load in loads:
        assert load.failures == [], load.failures[:5]
        assert set(load.answers[-10:]) <= new


async def test_a_pod_that_stops_before_its_endpoint_leaves_costs_no_l4_connection(
        tmp_path: object) -> None:
    """A pod whose process exits while its endpoint is still listed ready (SIGTERM without a
    preStop hook): new L4 connections that the engine sends it are tried again on another
    member, so none fails, before and while its checks take it out."""
    root = tmp_path / "manifests"  # type: ignore[operator]
    root.mkdir()
    stack = await make_stack(root, mode=BackendMode.CLUSTERIP, envoy_stats=EnvoyStats.BOUNDED)
    cluster = Cluster(stack, BackendMode.CLUSTERIP)
    try:
        for _ in range(2):
            pod = cluster.add()
            await cluster.start(pod)
            pod.ready = True
        await cluster.publish()
        await stack.start()
        for _ in range(400):  # both members checked and serving: a few seconds at most
            with contextlib.suppress(OSError, TimeoutError, ValueError, KeyError,
                                     asyncio.IncompleteReadError):
                if {await _tcp(cluster.lb_port) for _ in range(6)} == {"pod-2", "pod-3"}:
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the two pods never both answered")
        await cluster.stop(cluster.pods[0])  # gone, its endpoint still ready
        answers = Load(lambda: _tcp(cluster.lb_port))
        for _ in range(30):
            try:
                answers.answers.append(await answers.ask())
            except (OSError, TimeoutError, ValueError, KeyError,
                    asyncio.IncompleteReadError) as exc:
                answers.failures.append(repr(exc))
        assert answers.failures == []
        assert set(answers.answers) == {"pod-3"}
    finally:
        for pod in cluster.pods:
            await cluster.stop(pod)
        await stack.stop()
