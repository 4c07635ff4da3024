"""VIP pools from objects: VIPPool and MetalLB's IPAddressPool are read live from the snapshot
(MetalLB's only in its namespace), oldest first after the file's pools; an unusable or
overlapping pool object is not used and carries a problem; Services get addresses from them
through the translator exactly as from the file's pools."""

from __future__ import annotations

from typing import Any

from podway.model import ObjectRef, Snapshot
from podway.programs.ipam import Ipam, PoolKinds, parse_pools, pools_of
from podway.translate import Reason, TranslateOptions, translate
from tests import builders

ALL = (PoolKinds.VIPPOOLS, PoolKinds.METALLB)


def vippool(name: str, *addresses: str, ts: str = "2026-01-01T00:00:00Z",
            **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "podway.io/v1alpha1", "kind": "VIPPool",
            "metadata": {"name": name, "creationTimestamp": ts},
            "spec": {"addresses": list(addresses), **spec}}


def metallb(name: str, *addresses: str, ns: str = "metallb-system",
            ts: str = "2026-01-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": ts},
            "spec": {"addresses": list(addresses), **spec}}


def snapshot(*objects: dict[str, Any]) -> Snapshot:
    return Snapshot.of_objects([builders.typed(o) for o in objects])


def test_pools_come_from_both_kinds_oldest_first_after_the_file() -> None:
    """File pool, then the older object, then the younger; MetalLB's only from its namespace;
    a kind not asked for is not read."""
    file_pools = parse_pools({"pools": [{"name": "file", "addresses": ["198.18.0.1"]}]})
    snap = snapshot(vippool("young", "198.18.2.0/30", ts="2026-02-01T00:00:00Z"),
                    metallb("old", "198.18.1.1-198.18.1.2"),
                    metallb("elsewhere", "198.18.3.1", ns="default"))
    read = pools_of(snap, file_pools, ALL)
    assert [p.name for p in read.pools] == ["file", "old", "young"]
    assert read.problems == ()
    only_ours = pools_of(snap, file_pools, (PoolKinds.VIPPOOLS,))
    assert [p.name for p in only_ours.pools] == ["file", "young"]
    elsewhere = pools_of(snap, (), (PoolKinds.METALLB,), metallb_namespace="default")
    assert [p.name for p in elsewhere.pools] == ["elsewhere"]


def test_a_bad_or_overlapping_pool_object_is_refused_with_a_problem() -> None:
    """A bad range is InvalidPool; an overlap with an older pool, or a taken name, is
    PoolConflict on the younger object; neither pool is used, the others are."""
    snap = snapshot(vippool("good", "198.18.1.0/29"),
                    vippool("bad", "198.18.9.999", ts="2026-01-02T00:00:00Z"),
                    vippool("overlap", "198.18.1.4-198.18.1.9", ts="2026-01-03T00:00:00Z"),
                    metallb("good", "198.18.7.1", ts="2026-01-04T00:00:00Z"))
    read = pools_of(snap, (), ALL)
    assert [p.name for p in read.pools] == ["good"]
    found = {(p.ref.kind, p.ref.name): p.reason for p in read.problems}
    assert found == {("VIPPool", "bad"): Reason.INVALID_POOL,
                     ("VIPPool", "overlap"): Reason.POOL_CONFLICT,
                     ("IPAddressPool", "good"): Reason.POOL_CONFLICT}
    overlap = next(p for p in read.problems if p.ref.name == "overlap")
    assert "198.18.1.4" in overlap.message
    assert "'good'" in overlap.message


def test_services_get_addresses_from_pool_objects_through_the_translator() -> None:
    """No file: a VIPPool alone turns the IPAM on; the Service binds its first address, a
    Service outside the scope of the MetalLB pool with priority 1 gets the VIPPool's, and the
    refused pool object's problem is in the result."""
    svc = builders.service("web", type_="LoadBalancer", namespace="shop",
                           extra_meta={"uid": "u1", "creationTimestamp": "2026-03-01T00:00:00Z"})
    other = builders.service("api", type_="LoadBalancer", namespace="shop", labels={"x": "y"},
                             extra_meta={"uid": "u2",
                                         "creationTimestamp": "2026-03-02T00:00:00Z"})
    snap = snapshot(svc, other, vippool("ours", "198.18.4.8/30"),
                    metallb("scoped", "198.18.6.1", serviceAllocation={
                        "priority": 1, "serviceSelectors": [{"matchLabels": {"x": "y"}}]}),
                    vippool("broken", "nope", ts="2026-01-05T00:00:00Z"))
    opts = TranslateOptions(address="0.0.0.0", vips=Ipam((), kinds=ALL))
    result = translate(snap, opts)
    bound = {lst.name: lst.address for lst in result.ir.listeners}
    assert sorted(bound.values()) == ["198.18.4.9", "198.18.6.1"]
    assert any(lst.address == "198.18.6.1" and "api" in lst.name
               for lst in result.ir.listeners)
    (problem,) = [p for p in result.problems if p.ref == ObjectRef("VIPPool", "", "broken")]
    assert problem.reason is Reason.INVALID_POOL


def test_a_pool_in_use_is_kept_when_an_older_object_overlaps_it() -> None:
    """Pools holding an address some object holds go first: an overlapping pool object never
    takes the place of the one serving (creation times tie at second resolution)."""
    snap = snapshot(vippool("serving", "198.18.5.0/30", ts="2026-01-02T00:00:00Z"),
                    vippool("aaa-new", "198.18.5.2", ts="2026-01-01T00:00:00Z"))
    idle = pools_of(snap, (), ALL)
    assert [p.name for p in idle.pools] == ["aaa-new"]  # nothing held: the oldest wins
    busy = pools_of(snap, (), ALL, in_use={"198.18.5.1"})
    assert [p.name for p in busy.pools] == ["serving"]
    assert [p.ref.name for p in busy.problems] == ["aaa-new"]


def test_metallb_kinds_podway_does_not_serve_get_a_warning_each() -> None:
    """With MetalLB's pools read, its L2Advertisement, BGPAdvertisement, BGPPeer, Community
    and BFDProfile in its namespace each get an UnsupportedValue warning naming what to use
    instead; elsewhere, or without metallb pools, nothing is said."""
    def obj(kind: str, name: str, ns: str = "metallb-system") -> dict[str, Any]:
        version = "v1beta2" if kind == "BGPPeer" else "v1beta1"
        return {"apiVersion": f"metallb.io/{version}", "kind": kind,
                "metadata": {"name": name, "namespace": ns}, "spec": {}}

    kinds = ("L2Advertisement", "BGPAdvertisement", "BGPPeer", "Community", "BFDProfile")
    snap = snapshot(*(obj(k, k.lower()) for k in kinds), obj("BGPPeer", "elsewhere", "default"))
    said = pools_of(snap, (), ALL).problems
    assert sorted(p.ref.kind for p in said) == sorted(kinds)
    assert all(p.reason is Reason.UNSUPPORTED_VALUE for p in said)
    peer = next(p for p in said if p.ref.kind == "BGPPeer")
    assert "podway vip announce-metallb on each engine host" in peer.message
    assert pools_of(snap, (), (PoolKinds.VIPPOOLS,)).problems == ()


def test_a_metallb_pool_field_podway_does_not_know_is_said_not_ignored() -> None:
    """A spec field of an IPAddressPool that Podway does not know (a newer MetalLB's), also
    inside serviceAllocation, is an UnsupportedField warning on the pool naming the field; the
    pool is still used with the fields Podway knows. A pool with known fields only: nothing."""
    snap = snapshot(metallb("newer", "198.18.9.0/30", ipFamilyPolicy="SingleStack",
                            serviceAllocation={"priority": 2, "podSelectors": []}),
                    metallb("plain", "198.18.9.8/30", avoidBuggyIPs=True, autoAssign=False,
                            serviceAllocation={"priority": 1, "namespaces": ["a"]}))
    read = pools_of(snap, (), ALL)
    assert sorted(p.name for p in read.pools) == ["newer", "plain"]
    assert [(p.ref.name, p.reason, p.field) for p in read.problems] == [
        ("newer", Reason.UNSUPPORTED_FIELD, "spec.ipFamilyPolicy"),
        ("newer", Reason.UNSUPPORTED_FIELD, "spec.serviceAllocation.podSelectors")]
    assert "spec.ipFamilyPolicy is not carried" in read.problems[0].message
    assert pools_of(snap, (), (PoolKinds.VIPPOOLS,)).problems == ()
