"""GatewayClassConfig ``spec.defaults`` through the API: the controller reads the class config
(CRD as shipped in the chart) and its default timeout reaches the IR pools of that class's
Gateways only; an edit follows; a bad default makes the class Accepted=False/InvalidParameters
in its status, naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from podway.pipeline import State
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
