"""A cold controller sends its first state's clusters (members not yet resolved), then its load
assignments, ahead of the listeners and route tables (``Pipeline(clusters_first=True)``, as
``podway run``): an engine warms the pools while the rest is still being built; and its first
status pass waits until the engines connected hold the first state (``first_pass``), so its
writes do not compete with their apply (issue 24, cold start at 10,000 routes)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.xds.cache import Cache
from podway.kube.informer import Informer
from podway.programs.controller import first_pass
from tests.waiting import eventually

from .bed import GW, Bed, http_route
from .test_status import seed_gateway, status_patches


async def test_the_first_state_sets_clusters_then_assignments_before_the_rest(bed: Bed) -> None:
    seed_gateway(bed, routes=3)
    seen: list[dict[str, bool]] = []

    async def watch(cache: Cache) -> None:
        while True:
            await cache.changed().wait()
            seen.append({t: cache.is_set(t) for t in types.PUSH_ORDER})

    controller_task = asyncio.create_task(bed.start())
    await asyncio.sleep(0)  # ``start`` made the controller; its cache exists once it started
    assert bed.controller is not None
    async with asyncio.timeout(20):
        await bed.controller.started.wait()  # its pipeline runs from the next turn on
    watcher = asyncio.create_task(watch(bed.pipeline.cache))
    try:
        await controller_task
        state = await bed.until(lambda s: bool(s.ir.listeners) and bool(s.ir.pools))
        assert types.CLUSTER in state.changed_types
        assert types.ROUTE in state.changed_types
        assert seen, "the cache never changed"
        assert seen[:2] == [  # clusters as soon as the pools' settings are known
            {t: t == types.CLUSTER for t in types.PUSH_ORDER},
            {t: t in (types.CLUSTER, types.ENDPOINT) for t in types.PUSH_ORDER}]
        assert all(seen[-1].values())
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def test_the_first_status_pass_waits_for_a_connected_engine_to_be_served(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_gateway(bed, routes=3)
    connected = asyncio.Event()  # the lists wait for the stand-in engine: it is there first
    relist = Informer._relist

    async def gated(self: Informer) -> Any:
        await connected.wait()
        return await relist(self)

    monkeypatch.setattr(Informer, "_relist", gated)
    monkeypatch.setattr(first_pass, "IDLE_S", 60.0)  # a slow machine: still held
    starting = asyncio.create_task(bed.start())
    await asyncio.sleep(0)
    assert bed.controller is not None
    async with asyncio.timeout(20):
        await bed.controller.started.wait()
    server = bed.controller.server
    assert server is not None
    async with grpc.aio.insecure_channel(server.target) as channel:
        # An engine that asks for clusters and never answers: never served.
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources()
        await call.write(d.DeltaDiscoveryRequest(node=base_pb2.Node(id="stand-in"),
                                                 type_url=types.CLUSTER))
        await eventually(lambda: server.servicer.streams == 1)
        connected.set()
        await starting  # the first state
        writer = bed.controller.status
        assert writer is not None
        await eventually(lambda: writer.hold_first is None)  # the first pass has begun
        async with asyncio.timeout(20):
            response = await call.read()  # the clusters, unanswered
        assert response.type_url == types.CLUSTER
        await asyncio.sleep(0.3)  # no engine is served: no status yet
        assert not server.servicer.served()
        assert status_patches(bed, "httproutes") == 0
        call.cancel()  # the engine gone, nothing to wait for
        await eventually(lambda: status_patches(bed, "httproutes") == 3)


async def test_watch_events_are_counted_per_kind(bed: Bed) -> None:
    seed_gateway(bed, routes=3)
    controller = await bed.start()
    registry = controller.metrics.registry

    def counted(kind: str) -> float:
        return registry.get_sample_value("podway_controller_watch_events_total",
                                         {"kind": kind}) or 0.0

    assert counted("HTTPRoute") >= 3  # the three listed (and their status writes read back)
    assert counted("Gateway") >= 1
    before = counted("HTTPRoute")
    bed.emu.put("httproutes", http_route("r3", "r3.test"), group=GW)
    await eventually(lambda: counted("HTTPRoute") > before)
