"""A pool's retry budget, as Podway renders it, is a cluster the real Envoy accepts (and the
default, the plain retry cap, too)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict

from podway.envoy.config.clusters import cluster
from podway.envoy.engine.process import find_envoy
from podway.ir import PoolSettings, RetryBudget

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("budget", [None, RetryBudget(percent=40, min_concurrent=8)])
async def test_envoy_accepts_the_pool_cluster(tmp_path: Path, budget: RetryBudget | None
                                              ) -> None:
    built = MessageToDict(cluster("pool/shop/web/80", PoolSettings(retry_budget=budget)),
                          preserving_proto_field_name=True)
    thresholds = built["circuit_breakers"]["thresholds"][0]
    assert ("retry_budget" in thresholds) is (budget is not None)
    # Served by EDS in Podway; validated here as a static cluster with one member.
    built.pop("eds_cluster_config")
    built["type"] = "STATIC"
    built["load_assignment"] = {"cluster_name": built["name"], "endpoints": [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1",
                                                     "port_value": 9}}}}]}]}
    config = tmp_path / "envoy.json"
    config.write_text(json.dumps({"static_resources": {"clusters": [built]}}))
    process = await asyncio.create_subprocess_exec(
        str(find_envoy()), "--mode", "validate", "-c", str(config), "--disable-hot-restart",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        output, _ = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, output.decode(errors="replace")[-2000:]
