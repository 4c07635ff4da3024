"""The lab's control plane: the API server's allocations and a store that survives restart."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from podway.kube.emulator import ApiError
from podway.model.kinds import CRDS
from podway.programs.lab.controlplane import (
    GATEWAY_API_CRDS,
    ControlPlane,
    admit_service,
    install_podway_crds,
)
from podway.programs.lab.plan import make_plan
from tests import builders

Obj = dict[str, Any]


def svc(name: str, kind: str = "NodePort", **port: Any) -> Obj:
    return builders.service(name, type_=kind, ports=[{"port": 80, **port}], kind_fields=False)


def test_node_ports_are_allocated_unique_and_kept_on_update() -> None:
    """A NodePort Service gets a free nodePort and a clusterIP; an update without them keeps
    both; a taken or out-of-range port is refused like the API server does."""
    first = svc("a")
    admit_service(first, None, [])
    assert first["spec"]["ports"][0]["nodePort"] == 30000
    assert first["spec"]["clusterIP"].startswith("198.19.")
    second = svc("b")
    admit_service(second, None, [first])
    assert second["spec"]["ports"][0]["nodePort"] == 30001
    update = svc("a")
    admit_service(update, first, [first, second])
    assert update["spec"]["ports"][0]["nodePort"] == 30000
    assert update["spec"]["clusterIP"] == first["spec"]["clusterIP"]
    with pytest.raises(ApiError, match="already allocated"):
        admit_service(svc("c", nodePort=30001), None, [first, second])
    with pytest.raises(ApiError, match="valid range"):
        admit_service(svc("c", nodePort=80), None, [])
    plain = svc("d", "ClusterIP", nodePort=30005)
    admit_service(plain, None, [])
    assert "nodePort" not in plain["spec"]["ports"][0]


async def test_store_survives_a_restart_and_old_watches_get_410(tmp_path: Path) -> None:
    """After a restart from disk the objects (with their versions) are served on the same port;
    a watch from a version before the restart is told 410 Gone (re-list)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cp = ControlPlane(port=port, store=tmp_path / "store.json")
    await cp.start()
    try:
        base = f"http://127.0.0.1:{port}/api/v1/namespaces/default/services"
        async with aiohttp.ClientSession() as http:
            async with http.post(base, json=svc("web")) as resp:
                created = await resp.json()
            old_version = int(created["metadata"]["resourceVersion"]) - 1
            await cp.restart()
            async with http.get(f"{base}/web") as resp:
                again = await resp.json()
            assert again["metadata"]["uid"] == created["metadata"]["uid"]
            assert again["spec"]["ports"][0]["nodePort"] == 30000
            async with http.get(f"{base}?watch=1&resourceVersion={old_version}"
                                "&timeoutSeconds=2") as resp:
                line = await resp.content.readline()
            assert b'"code": 410' in line
    finally:
        await cp.stop()


def test_plan_uses_only_benchmarking_addresses() -> None:
    """Every address and CIDR of a big lab is inside 198.18.0.0/15."""
    from podway.programs.lab import plan as p

    bench = ipaddress.ip_network("198.18.0.0/15")
    lab = make_plan("x", 200)
    addresses = [p.EDGE_FABRIC_IP, p.EDGE_CLIENT_IP, p.CLIENT_IP, p.VIP,
                 *(n.ip for n in lab.nodes), *(n.gateway for n in lab.nodes)]
    assert all(ipaddress.ip_address(a) in bench for a in addresses)
    cidrs = [p.CLUSTER_IP_CIDR, p.FABRIC_CIDR, *(n.pod_cidr for n in lab.nodes)]
    assert all(ipaddress.ip_network(c).subnet_of(bench) for c in cidrs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="--nodes"):
        make_plan("x", 0)


async def test_a_new_lab_serves_the_shipped_gateway_api_crds(tmp_path: Path) -> None:
    """A new lab API holds every CRD of deploy/crds/gateway-api (experimental channel) as
    shipped, and serves their kinds at the versions the files declare: a ListenerSet and an
    XBackendTrafficPolicy can be created; the CRDs are the files' own (bundle-version)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    shipped = sorted(doc["metadata"]["name"] for p in GATEWAY_API_CRDS.glob("*.yaml")
                     for doc in yaml.safe_load_all(p.read_text())
                     if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition")
    assert len(shipped) == 13
    cp = ControlPlane(port=port, store=tmp_path / "store.json")
    await cp.start()
    try:
        crds = {c["metadata"]["name"]: c for c in cp.emu.objects("customresourcedefinitions")
                if c["spec"]["group"] != "podway.io"}
        assert sorted(crds) == shipped
        assert crds["gateways.gateway.networking.k8s.io"]["metadata"]["annotations"][
            "gateway.networking.k8s.io/bundle-version"] == "v1.6.1"
        by_kind = {c["spec"]["names"]["kind"]: c["spec"] for c in crds.values()}
        async with aiohttp.ClientSession() as http:
            for kind in ("ListenerSet", "XBackendTrafficPolicy"):
                spec = by_kind[kind]
                version = next(v["name"] for v in spec["versions"] if v["storage"])
                api = f"{spec['group']}/{version}"
                obj = {"apiVersion": api, "kind": kind,
                       "metadata": {"name": "x", "namespace": "default"}, "spec": {}}
                url = (f"http://127.0.0.1:{port}/apis/{api}/namespaces/default/"
                       f"{spec['names']['plural']}")
                async with http.post(url, json=obj) as resp:
                    assert resp.status == 201, (kind, await resp.text())
    finally:
        await cp.stop()


async def test_a_lab_serves_podways_own_crds_new_or_stored_before_them(tmp_path: Path) -> None:
    """Podway's CRDs (the kinds table's ships_crd rows, as the chart ships them) are in a new
    lab's API, a TrafficPolicy can be created through it; a lab stored without them gets them
    at its next start, and one already there (installed by the chart, say) is not replaced."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ours = sorted(k.crd_name for k in CRDS if k.ships_crd)
    shipped = Path(__file__).resolve().parents[4] / "deploy" / "helm" / "podway" / "crds"
    assert ours == sorted(f.name.removesuffix(".yaml") for f in shipped.glob("*.podway.io.yaml"))
    store = tmp_path / "store.json"
    cp = ControlPlane(port=port, store=store)
    await cp.start()
    try:
        names = sorted(c["metadata"]["name"] for c in cp.emu.objects("customresourcedefinitions")
                       if c["spec"]["group"] == "podway.io")
        assert names == ours
        policy = {"apiVersion": "podway.io/v1alpha1", "kind": "TrafficPolicy",
                  "metadata": {"name": "p", "namespace": "default"},
                  "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "web"}]}}
        url = f"http://127.0.0.1:{port}/apis/podway.io/v1alpha1/namespaces/default/trafficpolicies"
        async with aiohttp.ClientSession() as http, http.post(url, json=policy) as resp:
            assert resp.status == 201, await resp.text()
        for name in ours:  # as a lab stored before they shipped
            cp.emu.delete("customresourcedefinitions", "", name)
    finally:
        await cp.stop()
    assert "trafficpolicies.podway.io" not in store.read_text()  # stored without them
    cp = ControlPlane(port=port, store=store)  # loaded from the store, not served
    held = {c["metadata"]["name"] for c in cp.emu.objects("customresourcedefinitions")}
    assert set(ours) <= held
    assert install_podway_crds(cp.emu) == []  # already there: left alone
