"""GatewayClassConfig through the API (CRD as shipped in the chart): ``spec.defaults``' timeout
reaches the IR pools of that class's Gateways only, an edit follows, a bad default makes the
class Accepted=False/InvalidParameters naming the field; ``spec.engineKind`` against the
engines that connect (a Warning on the class's Gateways when they are of another kind)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from podway.pipeline import State
from tests.e2e.harness import free_port
from tests.waiting import eventually

from .bed import GW, Bed, cluster_service, edit, gateway, gateway_class, http_route

CLASS_CONFIG_CRD = (Path(__file__).resolve().parents[3] / "deploy" / "helm" / "podway"
                    / "crds" / "gatewayclassconfigs.podway.io.yaml")


def class_config(name: str, defaults: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "podway.io/v1alpha1", "kind": "GatewayClassConfig",
            "metadata": {"name": name}, "spec": {"defaults": defaults}}


def connect_ms(state: State, service: str) -> int | None:
    pool = state.ir.pools.get(f"pool/default/{service}/80")
    return None if pool is None else pool.settings.connect_timeout_ms


def class_accepted(bed: Bed, name: str) -> dict[str, Any] | None:
    obj = bed.emu.get("gatewayclasses", "", name, group=GW)
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Accepted"), None)


async def test_class_default_timeout_reaches_only_that_class_gateways_pools(bed: Bed) -> None:
    bed.emu.install_gateway_api()
    bed.emu.put("customresourcedefinitions", yaml.safe_load(CLASS_CONFIG_CRD.read_text()))
    tuned = gateway_class("tuned")
    tuned["spec"]["parametersRef"] = {"group": "podway.io", "kind": "GatewayClassConfig",
                                      "name": "tuned"}
    bed.emu.put("gatewayclasses", tuned, group=GW)
    bed.emu.put("gatewayclasses", gateway_class("podway"), group=GW)
    bed.emu.put("gatewayclassconfigs", class_config("tuned", {"timeouts": {"connect": "3s"}}),
                group="podway.io")
    bed.emu.put("gateways", gateway("edge", 18080, class_name="tuned"), group=GW)
    bed.emu.put("gateways", gateway("plain", 18081, class_name="podway"), group=GW)
    for name, parent in (("web", "edge"), ("api", "plain")):
        bed.emu.put("services", cluster_service(name))
        bed.emu.put("httproutes", http_route(name, f"{name}.test", name, parent=parent),
                    group=GW)
    await bed.start()
    state = await bed.until(lambda s: connect_ms(s, "web") == 3000
                            and connect_ms(s, "api") is not None)
    assert connect_ms(state, "api") != 3000  # the other class's Gateway: Podway's own
    await eventually(lambda: (class_accepted(bed, "tuned") or {}).get("status") == "True")
    # An edit of the class config reaches the pool; the other class's pool stays.
    edit(bed, "gatewayclassconfigs", class_config("tuned", {"timeouts": {"connect": "4s"}}),
         group="podway.io")
    state = await bed.until(lambda s: connect_ms(s, "web") == 4000)
    assert connect_ms(state, "api") not in (3000, 4000)
    # A bad default: the class is refused naming the field, its Gateway is no longer served.
    edit(bed, "gatewayclassconfigs", class_config("tuned", {"timeouts": {"connect": "soon"}}),
         group="podway.io")
    state = await bed.until(lambda s: connect_ms(s, "web") is None)
    assert connect_ms(state, "api") is not None
    await eventually(lambda: (class_accepted(bed, "tuned") or {}).get("status") == "False")
    refused = class_accepted(bed, "tuned")
    assert refused is not None
    assert refused["reason"] == "InvalidParameters"
    assert "spec.defaults.timeouts.connect" in refused["message"]


@pytest.mark.e2e
async def test_a_class_meant_for_haproxy_served_by_envoy_gets_a_warning(bed: Bed) -> None:
    """engineKind haproxy, and a real Envoy (which serves every group) connects: the class's
    Gateway gets a Warning EngineKindMismatch naming the Envoy; the other class's does not."""
    bed.emu.install_gateway_api()
    bed.emu.put("customresourcedefinitions", yaml.safe_load(CLASS_CONFIG_CRD.read_text()))
    tuned = gateway_class("tuned")
    tuned["spec"]["parametersRef"] = {"group": "podway.io", "kind": "GatewayClassConfig",
                                      "name": "tuned"}
    bed.emu.put("gatewayclasses", tuned, group=GW)
    bed.emu.put("gatewayclasses", gateway_class("podway"), group=GW)
    bed.emu.put("gatewayclassconfigs", {**class_config("tuned", {}), "spec": {
        "engineKind": "haproxy"}}, group="podway.io")
    bed.emu.put("gateways", gateway("edge", free_port(), class_name="tuned"), group=GW)
    bed.emu.put("gateways", gateway("plain", free_port(), class_name="podway"), group=GW)
    await bed.start()
    await bed.until(lambda s: len(s.ir.listeners) == 2)
    assert not any(e.get("reason") == "EngineKindMismatch" for e in bed.emu.events)
    await bed.engine("envoy-1")

    def warned() -> list[dict[str, Any]]:
        return [e for e in bed.emu.events if e.get("reason") == "EngineKindMismatch"]

    await eventually(lambda: bool(warned()))
    event = warned()[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "edge"
    assert "meant for haproxy" in event["message"]
    assert "envoy-1 (envoy)" in event["message"]
    assert {e["involvedObject"]["name"] for e in warned()} == {"edge"}
