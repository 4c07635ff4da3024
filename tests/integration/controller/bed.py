"""A test bed for the controller: the wire-level API emulator, a controller on it, and (for
traffic tests) a real Envoy fed by the controller over xDS. Loopback only; every task and Envoy
is stopped in teardown, also when the test fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.kube.emulator import KubeEmulator
from podway.pipeline import Pipeline, State
from podway.programs.controller.main import Controller, ControllerOptions
from podway.translate import BackendMode, TranslateOptions

# The shared builders; the controller tests import them from the bed too.
from tests.builders import (  # noqa: F401  (the bed's tests build objects with these)
    GW,
    Obj,
    endpoint_slice,
    gateway,
    gateway_class,
    http_route,
    lb_service,
    node,
    pod,
    service,
)

FAST = Backoff(base=0.01, cap=0.2, jitter=0)


@dataclass
class Bed:
    emu: KubeEmulator
    api: client.ApiClient
    translate: TranslateOptions
    lb_address: str | None = "198.18.0.100"
    controller: Controller | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    engines: list[Engine] = field(default_factory=list)

    def options(self, **overrides: Any) -> ControllerOptions:
        base: dict[str, Any] = {
            "translate": self.translate, "xds_address": "127.0.0.1:0",
            "xds_unauthenticated": True,
            "lb_address": self.lb_address, "debounce_s": 0.01, "max_wait_s": 0.05,
            "backoff": FAST}
        return ControllerOptions(**{**base, **overrides})

    async def start(self, **overrides: Any) -> Controller:
        self.controller = Controller(self.options(**overrides), api=self.api)
        self.tasks.append(asyncio.create_task(self.controller.run(), name="controller"))
        async with asyncio.timeout(20):
            await self.controller.started.wait()
            await self.pipeline.wait_for(lambda s: True)
        return self.controller

    async def stop_controller(self) -> None:
        await stop_task(self.tasks.pop(self.tasks.index(
            next(t for t in self.tasks if t.get_name() == "controller"))))

    @property
    def pipeline(self) -> Pipeline:
        assert self.controller is not None
        assert self.controller.pipeline is not None
        return self.controller.pipeline

    async def until(self, predicate: Callable[[State], bool], limit_s: float = 15) -> State:
        async with asyncio.timeout(limit_s):
            return await self.pipeline.wait_for(predicate)

    async def engine(self, node_id: str = "engine-1", *, group: str = "",
                     delta: bool = True) -> Engine:
        assert self.controller is not None
        assert self.controller.server is not None
        engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
            BootstrapOptions(node_id=node_id, xds=self.controller.server.target, delta=delta,
                             engine_group=group))))
        self.engines.append(engine)
        self.tasks.append(asyncio.create_task(engine.run(), name=f"engine-{node_id}"))
        await engine.wait_ready(limit_s=30)
        return engine

    async def close(self) -> None:
        """Cancel everything started here; a task that does not end within 30 s is a bug
        (shutdown must be prompt): its stack and every other task's are printed, then it fails."""
        for task in reversed(self.tasks):
            task.cancel()
        if not self.tasks:
            return
        _, pending = await asyncio.wait(self.tasks, timeout=30)
        for task in self.tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a failure already showed in the test itself
        if pending:
            for task in asyncio.all_tasks():
                task.print_stack(limit=8)
            raise AssertionError(f"tasks did not stop: {[t.get_name() for t in pending]}")


async def stop_task(task: asyncio.Task[None], *, limit_s: float = 30) -> None:
    """Cancel ``task`` and wait until it ends. One that has not ended ``limit_s`` after its
    cancel is a bug (shutdown must be prompt): every task's stack is printed, then it fails.
    A cancel of the caller (the test timing out) is raised, never taken for the task's, so a
    hung stop cannot let the test run on; the task's own failure is raised."""
    task.cancel()
    await asyncio.wait({task}, timeout=limit_s)
    if not task.done():
        for other in asyncio.all_tasks():
            other.print_stack(limit=12)
        raise AssertionError(f"task {task.get_name()} did not end within {limit_s:.0f} s "
                             "of its cancel (every task's stack is printed above)")
    if not task.cancelled():
        task.result()

def members(state: State, pool: str) -> list[str]:
    found = state.ir.pools.get(pool)
    return [] if found is None else [f"{m.address}:{m.port}" for m in found.members]


def options(mode: BackendMode = BackendMode.CLUSTERIP, **kw: Any) -> TranslateOptions:
    return TranslateOptions(address="127.0.0.1", mode=mode, **kw)




def edit(bed: Bed, plural: str, obj: Obj, *, group: str | None = None) -> None:
    """Replace an object's spec and metadata as a user would: its status stays."""
    namespace = obj["metadata"].get("namespace", "default")
    current = bed.emu.get(plural, namespace, obj["metadata"]["name"], group=group)
    status = (current or {}).get("status")
    bed.emu.put(plural, {**obj, "status": status} if status else obj, group=group)


def cluster_service(name: str, port: int = 80, target: int = 8080,
                    namespace: str = "default") -> Obj:
    return service(name, port, target, namespace=namespace)
