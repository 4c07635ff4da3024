"""Engine group names come from any engine's xDS node metadata: their count and length are
bounded, and the xDS server ends a refused engine's stream with one line."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy.xds.cache import Cache
from podway.envoy.xds.server import GROUP_METADATA, XdsServer
from podway.programs.controller import groups as groups_module
from podway.programs.controller.groups import MAX_GROUP_NAME, EngineGroups, GroupRefused

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"


def groups(limit: int, monkeypatch: pytest.MonkeyPatch) -> EngineGroups:
    monkeypatch.setattr(groups_module, "MAX_GROUPS", limit)
    return EngineGroups(SimpleNamespace(state=None, reuse_port=False,
                                          detailed_stats=False))  # type: ignore[arg-type]


def test_group_caches_are_bounded_in_count_and_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to MAX_GROUPS caches; a known group is still served past it; a new one or an
    over-long name is GroupRefused."""
    engine_groups = groups(2, monkeypatch)
    a = engine_groups.cache_for("a")
    engine_groups.cache_for("b")
    assert engine_groups.cache_for("a") is a
    with pytest.raises(GroupRefused):
        engine_groups.cache_for("c")
    with pytest.raises(GroupRefused):
        groups(10, monkeypatch).cache_for("x" * (MAX_GROUP_NAME + 1))
    assert set(engine_groups.groups) == {"a", "b"}


async def test_an_engine_naming_a_refused_group_gets_resource_exhausted(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    engine_groups = groups(1, monkeypatch)
    engine_groups.cache_for("a")
    server = XdsServer(Cache(), "127.0.0.1:0", unauthenticated=True,
                       groups=engine_groups.cache_for)
    await server.start()
    try:
        node = base_pb2.Node(id="e")
        node.metadata.fields[GROUP_METADATA].string_value = "b"
        request = d.DiscoveryRequest(node=node, type_url="type.googleapis.com/"
                                     "envoy.config.cluster.v3.Cluster")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            call: Any = channel.stream_stream(
                ADS, request_serializer=d.DiscoveryRequest.SerializeToString,
                response_deserializer=d.DiscoveryResponse.FromString)(iter([request]))
            with caplog.at_level(logging.WARNING), pytest.raises(grpc.aio.AioRpcError) as info:
                async for _ in call:
                    pass
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert any("groups are served already" in r.getMessage() for r in caplog.records)
        assert set(engine_groups.groups) == {"a"}
    finally:
        await server.stop(grace=0)
