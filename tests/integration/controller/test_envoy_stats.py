"""``podway controller --envoy-stats``: the routers it builds keep Envoy's per-pool stats only
when the engines keep every stat (``detailed``), for every engine group's cache as for the
default one. Before the option existed, a detailed engine behind a controller lacked them."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from podway.envoy import types
from podway.envoy.xds.cache import Cache
from tests.waiting import eventually

from .bed import Bed
from .test_status import seed_gateway


def router_dynamic_stats(cache: Cache) -> set[bool]:
    """``dynamic_stats`` of every router in the cache's listeners."""
    found: set[bool] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            config = node.get("typed_config")
            if isinstance(config, dict) and str(config.get("@type", "")).endswith(".Router"):
                found.add(bool(config.get("dynamic_stats", True)))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for resource in cache.get(types.LISTENER).resources.values():
        walk(json_format.MessageToDict(resource.message, preserving_proto_field_name=True))
    return found


@pytest.mark.parametrize("detailed", [False, True])
async def test_routers_keep_per_pool_stats_only_for_detailed_engines(bed: Bed,
                                                                     detailed: bool) -> None:
    seed_gateway(bed, routes=1)
    controller = await bed.start(detailed_stats=detailed)
    await bed.until(lambda s: len(s.ir.listeners) == 1)
    await eventually(lambda: router_dynamic_stats(bed.pipeline.cache) == {detailed})
    assert controller.groups is not None
    group = controller.groups.cache_for("default")  # a group cache, its own builder
    await eventually(lambda: router_dynamic_stats(group) == {detailed})
