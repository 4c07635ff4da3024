"""The controller with VIP pools (IPAM): Services get addresses in status and a
podway.io/VIPAllocated condition, the one that finds the pool exhausted gets a Warning event and
a False condition and waits, a deleted owner's address goes to it, and a
restarted controller keeps every allocation (read back from status) without writing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from podway.programs.ipam import PoolKinds, parse_pools
from tests.waiting import eventually

from .bed import Bed, lb_service

POOLS = parse_pools({"pools": [{"name": "p", "addresses": ["198.18.7.1-198.18.7.2"]}]})


def ingress(bed: Bed, name: str) -> Any:
    obj = bed.emu.get("services", "default", name)
    return ((obj or {}).get("status") or {}).get("loadBalancer", {}).get("ingress")


def vip_condition(bed: Bed, name: str) -> Any:
    obj = bed.emu.get("services", "default", name)
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "podway.io/VIPAllocated"), {})


async def test_allocations_pending_release_and_restart(bed: Bed) -> None:
    """a and b (older) get the two addresses, c waits with PoolExhausted; deleting a gives c
    a's address; a restarted controller rewrites nothing."""
    bed.lb_address = None
    for name in ("a", "b", "c"):
        bed.emu.put("services", lb_service(name, 9000))
    await bed.start(vip_pools=POOLS)
    await eventually(lambda: ingress(bed, "a") == [{"ip": "198.18.7.1"}])
    await eventually(lambda: ingress(bed, "b") == [{"ip": "198.18.7.2"}])
    await eventually(lambda: any(e.get("reason") == "PoolExhausted" and e.get("type") == "Warning"
                            and e["involvedObject"]["name"] == "c" for e in bed.emu.events))
    assert not ingress(bed, "c")
    await eventually(lambda: vip_condition(bed, "c").get("reason") == "PoolExhausted")
    assert vip_condition(bed, "c")["status"] == "False"
    assert vip_condition(bed, "a")["status"] == "True"
    listeners = {ls.address for ls in bed.pipeline.state.ir.listeners}  # type: ignore[union-attr]
    assert listeners == {"198.18.7.1", "198.18.7.2"}

    bed.emu.delete("services", "default", "a")
    await bed.until(lambda s: {ls.name for ls in s.ir.listeners}
                    == {"service/default/b/9000/tcp", "service/default/c/9000/tcp"})
    await eventually(lambda: ingress(bed, "c") == [{"ip": "198.18.7.1"}])
    await eventually(lambda: vip_condition(bed, "c").get("status") == "True")
    assert ingress(bed, "b") == [{"ip": "198.18.7.2"}]

    await bed.stop_controller()
    before = [p for p in bed.emu.patches if p.subresource == "status"]
    await bed.start(vip_pools=POOLS)
    await bed.until(lambda s: {ls.address for ls in s.ir.listeners}
                    == {"198.18.7.1", "198.18.7.2"})
    assert ingress(bed, "b") == [{"ip": "198.18.7.2"}]
    assert ingress(bed, "c") == [{"ip": "198.18.7.1"}]
    assert [p for p in bed.emu.patches if p.subresource == "status"] == before


def lb_ingress(bed: Bed, name: str) -> Any:
    obj = bed.emu.get("ingresses", "default", name)
    return ((obj or {}).get("status") or {}).get("loadBalancer", {}).get("ingress")


async def test_ingress_gets_a_vip_and_keeps_it_across_a_restart(bed: Bed) -> None:
    """With --vip-pools and no --lb-address, the Ingress listeners get a VIP from the pool
    (older than the Service, they get the first address), every Ingress publishes it in
    status.loadBalancer, and a restarted controller reads it back and keeps it."""
    bed.lb_address = None
    bed.emu.put("services", lb_service("late", 9000) | {"metadata": {
        "name": "late", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:09Z"}})
    for name in ("shop", "blog"):
        bed.emu.put("ingresses", {
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": "default",
                         "creationTimestamp": "2026-01-01T00:00:01Z"},
            "spec": {"ingressClassName": "podway", "rules": [{"host": f"{name}.test", "http": {
                "paths": [{"path": "/", "pathType": "Prefix", "backend": {
                    "service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    await bed.start(vip_pools=POOLS)
    for name in ("shop", "blog"):
        await eventually(lambda name=name: lb_ingress(bed, name) == [{"ip": "198.18.7.1"}])
    await eventually(lambda: ingress(bed, "late") == [{"ip": "198.18.7.2"}])
    state = bed.pipeline.state
    assert state is not None
    assert {ls.name: ls.address for ls in state.ir.listeners if ls.name.startswith("ingress")} \
        == {"ingress/http": "198.18.7.1"}

    await bed.stop_controller()
    before = [p for p in bed.emu.patches if p.subresource == "status"]
    await bed.start(vip_pools=POOLS)
    await bed.until(lambda s: any(ls.name == "ingress/http" and ls.address == "198.18.7.1"
                                  for ls in s.ir.listeners))
    assert [p for p in bed.emu.patches if p.subresource == "status"] == before


VIPPOOL_CRD = (Path(__file__).resolve().parents[3]
               / "deploy/helm/podway/crds/vippools.podway.io.yaml")
# MetalLB's IPAddressPool CRD as far as the API needs it (names, scope, version).
METALLB_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "ipaddresspools.metallb.io"},
    "spec": {"group": "metallb.io", "scope": "Namespaced",
             "names": {"kind": "IPAddressPool", "plural": "ipaddresspools",
                       "singular": "ipaddresspool", "listKind": "IPAddressPoolList"},
             "versions": [{"name": "v1beta1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                           "subresources": {"status": {}}}]}}


def pool_object(kind: str, name: str, *addresses: str, **spec: Any) -> dict[str, Any]:
    group = "podway.io/v1alpha1" if kind == "VIPPool" else "metallb.io/v1beta1"
    meta: dict[str, Any] = {"name": name}
    if kind == "IPAddressPool":
        meta["namespace"] = "metallb-system"
    return {"apiVersion": group, "kind": kind, "metadata": meta,
            "spec": {"addresses": list(addresses), **spec}}


async def test_pools_from_objects_are_read_live(bed: Bed) -> None:
    """No pool file: a VIPPool created after start gives a waiting Service its address; a
    MetalLB IPAddressPool with priority 1 (and a field Podway does not know: a Warning event
    naming it) then serves the next Service first; a VIPPool that overlaps gets a Warning event
    (PoolConflict) and is not used."""
    bed.lb_address = None
    bed.emu.put("services", lb_service("a", 9000))
    await bed.start(vip_pool_kinds=(PoolKinds.VIPPOOLS, PoolKinds.METALLB))
    bed.emu.put("customresourcedefinitions", yaml.safe_load(VIPPOOL_CRD.read_text()))
    bed.emu.put("customresourcedefinitions", METALLB_CRD)
    bed.emu.put("vippools", pool_object("VIPPool", "ours", "198.18.7.8/30"), group="podway.io")
    await eventually(lambda: ingress(bed, "a") == [{"ip": "198.18.7.9"}])

    bed.emu.put("ipaddresspools", pool_object(
        "IPAddressPool", "theirs", "198.18.8.1-198.18.8.3",
        serviceAllocation={"priority": 1}, laterField=True), group="metallb.io")
    bed.emu.put("vippools", pool_object("VIPPool", "clash", "198.18.7.10"), group="podway.io")
    await eventually(lambda: any(e.get("reason") == "PoolConflict"
                                 and e["involvedObject"]["name"] == "clash"
                                 for e in bed.emu.events))
    # a field Podway does not know (a newer MetalLB's) is said on the pool, which is used
    await eventually(lambda: any(e.get("reason") == "UnsupportedField"
                                 and e["involvedObject"]["name"] == "theirs"
                                 and "spec.laterField is not carried" in e.get("message", "")
                                 and e.get("type") == "Warning" for e in bed.emu.events))
    bed.emu.put("services", lb_service("b", 9001))
    await eventually(lambda: ingress(bed, "b") == [{"ip": "198.18.8.1"}])
    assert ingress(bed, "a") == [{"ip": "198.18.7.9"}]  # a held address stays
    # The pools' status, written by the controller: counts, and why "clash" is not used.
    await eventually(lambda: pool_status(bed, "vippools", "", "ours").get("assignedIPv4") == 1)
    assert pool_status(bed, "vippools", "", "ours")["availableIPv4"] == 1
    await eventually(lambda: pool_status(bed, "ipaddresspools", "metallb-system", "theirs") == {
        "assignedIPv4": 1, "assignedIPv6": 0, "availableIPv4": 2, "availableIPv6": 0})
    await eventually(lambda: [(c["type"], c["status"], c["reason"]) for c in pool_status(
        bed, "vippools", "", "clash").get("conditions", [])] == [
            ("Accepted", "False", "PoolConflict")])
    bed.emu.delete("services", "default", "b")
    await eventually(lambda: pool_status(bed, "ipaddresspools", "metallb-system",
                                         "theirs").get("assignedIPv4") == 0)


def pool_status(bed: Bed, plural: str, namespace: str, name: str) -> dict[str, Any]:
    group = "podway.io" if plural == "vippools" else "metallb.io"
    obj = bed.emu.get(plural, namespace, name, group=group)
    return dict((obj or {}).get("status") or {})
