"""Pool objects' status: a VIPPool shows its addresses assigned and available and whether it is
used (Accepted, or InvalidPool / PoolConflict with the event's message); MetalLB's
IPAddressPool shows MetalLB's four counts. ``Desired`` follows them as from scratch and names
only the pools whose counts changed."""

from __future__ import annotations

from typing import Any

from podway.model import Snapshot
from podway.pipeline import State
from podway.programs.controller.status_desired import Desired, desired
from podway.programs.ipam import Ipam, PoolKinds
from podway.sources.base import SourceUpdate
from podway.status.incremental import DocumentBuilder
from podway.translate import IncrementalTranslator, TranslateOptions
from tests import builders
from tests.unit.programs.ipam.test_pool_objects import metallb, vippool

OPTS = TranslateOptions(address="0.0.0.0",
                        vips=Ipam((), kinds=(PoolKinds.VIPPOOLS, PoolKinds.METALLB)))
POOLS = [
    vippool("web", "198.18.1.0/29", "2001:db8::/126"),  # 6 IPv4, 4 IPv6
    vippool("bad", "198.18.9.999", ts="2026-01-02T00:00:00Z"),
    vippool("overlap", "198.18.1.4-198.18.1.9", ts="2026-01-03T00:00:00Z"),
    metallb("lb", "198.18.2.0/30", ts="2026-01-04T00:00:00Z",
            serviceAllocation={"namespaces": ["mlb"], "priority": 1}),  # MetalLB's CIDR: all 4
]


def lb_service(name: str, namespace: str = "shop", i: int = 0) -> dict[str, Any]:
    return builders.service(name, type_="LoadBalancer", namespace=namespace, extra_meta={
        "uid": f"u-{name}", "creationTimestamp": f"2026-03-01T00:00:{i:02d}Z"})


class World:
    """A controller's status readers over a changing snapshot."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.snapshot = Snapshot.of_objects([builders.typed(o) for o in objects])
        self.translator = IncrementalTranslator(OPTS)
        self.documents = DocumentBuilder()
        self.wanted = Desired(opts=OPTS, lb_address=None)
        self.generation = 0

    def put(self, *objects: dict[str, Any]) -> set[Any]:
        for typed in map(builders.typed, objects):
            self.snapshot = self.snapshot.replace(typed.KIND, {typed.key: typed})
        return self.step()

    def delete(self, kind: str, namespace: str, name: str) -> set[Any]:
        self.snapshot = self.snapshot.replace(kind, {(namespace, name): None})
        return self.step()

    def step(self) -> set[Any]:
        self.generation += 1
        state = State(version=self.generation, generation=self.generation,
                      update=SourceUpdate(self.snapshot, ()),
                      result=self.translator.update(self.snapshot), rejections=())
        doc = self.documents.of_state(state)
        touched = self.wanted.update(doc, state)
        assert dict(self.wanted.want) == desired(doc, state, opts=OPTS, lb_address=None)
        return touched

    def status(self, kind: str, name: str, namespace: str = "") -> Any:
        return self.wanted.want.get((kind, (namespace, name)))


def test_pool_objects_show_counts_and_whether_they_are_used() -> None:
    world = World(*POOLS, lb_service("a", i=1), lb_service("b", i=2),
                  lb_service("m", namespace="mlb", i=3))
    world.step()
    web = world.status("VIPPool", "web")
    assert {k: v for k, v in web.items() if k != "conditions"} == {
        "assignedIPv4": 2, "assignedIPv6": 0, "availableIPv4": 4, "availableIPv6": 4}
    assert [(c["type"], c["status"], c["reason"]) for c in web["conditions"]] == [
        ("Accepted", "True", "Accepted")]
    bad = world.status("VIPPool", "bad")["conditions"][0]
    assert (bad["status"], bad["reason"]) == ("False", "InvalidPool")
    assert "198.18.9.999" in bad["message"]
    overlap = world.status("VIPPool", "overlap")
    assert overlap["conditions"][0]["reason"] == "PoolConflict"
    assert overlap["availableIPv4"] == 0
    # MetalLB's own status fields, no conditions (its CRD has none): "m" drew from it
    assert world.status("IPAddressPool", "lb", "metallb-system") == {
        "assignedIPv4": 1, "assignedIPv6": 0, "availableIPv4": 3, "availableIPv6": 0}


def test_only_the_pool_whose_counts_changed_is_recomputed() -> None:
    """A new Service drawing from "web" touches "web" alone; the other pools' statuses stay the
    very same objects; deleting it gives the counts back."""
    world = World(*POOLS, lb_service("a", i=1))
    world.step()
    before = {t: s for t, s in world.wanted.want.items() if t[0] != "Service"}
    touched = world.put(lb_service("b", i=2))
    pools = {t for t in touched if t[0] in ("VIPPool", "IPAddressPool")}
    assert pools == {("VIPPool", ("", "web"))}
    for target, status in before.items():
        if target != ("VIPPool", ("", "web")):
            assert world.wanted.want[target] is status
    assert world.status("VIPPool", "web")["assignedIPv4"] == 2
    touched = world.delete("Service", "shop", "b")
    assert ("VIPPool", ("", "web")) in touched
    assert world.status("VIPPool", "web")["assignedIPv4"] == 1


def test_a_refused_pool_of_the_same_name_does_not_take_the_used_one_s_counts() -> None:
    """A VIPPool and a younger IPAddressPool both named "dup" (the latter refused): a Service
    added later counts on the VIPPool, followed incrementally as from scratch."""
    world = World(vippool("dup", "198.18.7.1-198.18.7.4"),
                  metallb("dup", "198.18.8.1", ts="2026-01-05T00:00:00Z"), lb_service("a", i=1))
    world.step()
    assert world.status("VIPPool", "dup")["assignedIPv4"] == 1
    world.put(lb_service("b", i=2))
    assert world.status("VIPPool", "dup")["assignedIPv4"] == 2
    assert world.status("IPAddressPool", "dup", "metallb-system")["availableIPv4"] == 0


def test_a_pool_object_added_or_removed_gets_or_loses_its_status() -> None:
    world = World(lb_service("a", i=1))
    assert world.step() == {("Service", ("shop", "a"))}
    touched = world.put(vippool("late", "198.18.5.1-198.18.5.2"))
    assert ("VIPPool", ("", "late")) in touched
    assert world.status("VIPPool", "late")["assignedIPv4"] == 1
    touched = world.delete("VIPPool", "", "late")
    assert ("VIPPool", ("", "late")) in touched
    assert world.status("VIPPool", "late") is None


def test_no_pool_objects_read_no_pool_status() -> None:
    opts = TranslateOptions(address="0.0.0.0", vips=Ipam(()))
    assert Desired(opts=opts, lb_address=None)._pools is None
