"""Serve what can be served when the API refuses a list (issue 23): CustomResourceDefinitions
that cannot be listed (404, or 403 under a narrower ClusterRole) or a Gateway API kind the
ClusterRole leaves out block nothing else — Services and Ingresses get their status, the kinds
that can be listed are served — and what is refused is reported (log, metric, a Warning event
on the GatewayClass); a refusal lifted later is picked up without a restart."""

from __future__ import annotations

from typing import Any

import pytest

from tests.waiting import eventually

from .bed import (
    GW,
    Bed,
    cluster_service,
    endpoint_slice,
    gateway,
    gateway_class,
    http_route,
    lb_service,
    members,
)

FOREVER = 10**9
INGRESS = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": "shop", "namespace": "default"},
           "spec": {"ingressClassName": "podway", "rules": [{"host": "shop.test", "http": {
               "paths": [{"path": "/", "pathType": "Prefix", "backend": {
                   "service": {"name": "web", "port": {"number": 80}}}}]}}]}}


def _lb_ingress(bed: Bed, plural: str, name: str) -> Any:
    obj = bed.emu.get(plural, "default", name) or {}
    return (obj.get("status") or {}).get("loadBalancer", {}).get("ingress")


def _refused_metric(bed: Bed) -> dict[str, float]:
    assert bed.controller is not None
    gauge = bed.controller.metrics.kinds_refused
    return {labels["kind"]: value for metric in gauge.collect() for sample in metric.samples
            if (labels := sample.labels) and (value := sample.value)}


def _workload(bed: Bed) -> None:
    bed.translate = bed.translate.__class__(address="0.0.0.0", http_port=18080)
    bed.emu.put("services", lb_service("lb", 9000))
    bed.emu.put("services", cluster_service("web"))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "198.18.5.1"}),
                group="discovery.k8s.io")
    bed.emu.put("ingresses", INGRESS)


@pytest.mark.parametrize("status", [404, 403])
async def test_crd_list_refused_still_writes_service_and_ingress_status(bed: Bed,
                                                                        status: int) -> None:
    """No CRD list ever works and no Gateway API is installed: the Service and the Ingress are
    served and get their addresses; the refusal is in the metric."""
    bed.emu.fail(status, plural="customresourcedefinitions", times=FOREVER)
    _workload(bed)
    await bed.start()
    await eventually(lambda: _lb_ingress(bed, "services", "lb") == [{"ip": "198.18.0.100"}])
    await eventually(lambda: _lb_ingress(bed, "ingresses", "shop") == [{"ip": "198.18.0.100"}])
    state = await bed.until(lambda s: members(s, "pool/default/web/80") == ["198.18.5.1:8080"])
    assert {ls.port for ls in state.ir.listeners} >= {9000}
    await eventually(lambda: _refused_metric(bed) == {"CustomResourceDefinition": 1.0})


async def test_crd_list_forbidden_finds_gateway_kinds_by_listing_them(bed: Bed) -> None:
    """403 on CRDs, but the ClusterRole may read the Gateway API: the kinds are found by listing
    them, the route is served, and the GatewayClass gets a Warning naming the refusal."""
    bed.emu.fail(403, plural="customresourcedefinitions", times=FOREVER)
    bed.emu.install_gateway_api()
    _workload(bed)
    bed.emu.put("gatewayclasses", gateway_class(), group=GW)
    bed.emu.put("gateways", gateway(), group=GW)
    bed.emu.put("httproutes", http_route("r0", "r0.test"), group=GW)
    await bed.start()
    state = await bed.until(lambda s: members(s, "pool/default/web/80") == ["198.18.5.1:8080"]
                            and any(ls.port == 8080 for ls in s.ir.listeners))
    assert any(vh.hostname == "r0.test" for ls in state.ir.listeners if ls.port == 8080
               for vh in ls.virtual_hosts)
    await eventually(lambda: _lb_ingress(bed, "services", "lb") == [{"ip": "198.18.0.100"}])
    await eventually(lambda: any(e.get("reason") == "KindsRefused"
                            and e["involvedObject"]["kind"] == "GatewayClass"
                            and "CustomResourceDefinition" in e["message"]
                            for e in bed.emu.events))


async def test_a_forbidden_route_kind_blocks_nothing_and_is_picked_up_once_allowed(
        bed: Bed) -> None:
    """HTTPRoute lists are refused (403): Services, Ingress and the Gateway are served and the
    GatewayClass says HTTPRoute is refused; once allowed, the route is served, no restart."""
    bed.emu.install_gateway_api()
    bed.emu.fail(403, plural="httproutes", times=FOREVER)
    _workload(bed)
    bed.emu.put("gatewayclasses", gateway_class(), group=GW)
    bed.emu.put("gateways", gateway(), group=GW)
    bed.emu.put("httproutes", http_route("r0", "r0.test"), group=GW)
    await bed.start()
    await eventually(lambda: _lb_ingress(bed, "services", "lb") == [{"ip": "198.18.0.100"}])
    await eventually(lambda: _lb_ingress(bed, "ingresses", "shop") == [{"ip": "198.18.0.100"}])
    await eventually(lambda: any(e.get("reason") == "KindsRefused" and "HTTPRoute" in e["message"]
                            for e in bed.emu.events))
    assert _refused_metric(bed) == {"HTTPRoute": 1.0}
    bed.emu.clear_faults()
    await bed.until(lambda s: any(vh.hostname == "r0.test" for ls in s.ir.listeners
                                  if ls.port == 8080 for vh in ls.virtual_hosts), limit_s=20)
    await eventually(lambda: _refused_metric(bed) == {})
