"""Pools scoped as MetalLB scopes them: serviceAllocation (priority, namespaces, namespace and
service selectors) and avoidBuggyIPs — in the file and in pool objects alike."""

from __future__ import annotations

import pytest

from podway.base.errors import ConfigError
from podway.model import ObjectRef
from podway.programs.ipam import Claim, allocate, parse_pools
from podway.translate.core.problems import Reason


def claim(name: str, ns: str = "shop", created: float = 0.0, **kw: object) -> Claim:
    return Claim(ref=ObjectRef("Service", ns, name), created=created, uid=f"uid-{name}",
                 ports=frozenset({("TCP", 80)}), **kw)  # type: ignore[arg-type]


def test_pools_are_tried_by_priority_one_first_and_unset_last() -> None:
    """priority 1 before 5 before unset (0), whatever the order written."""
    pools = parse_pools({"pools": [
        {"name": "last", "addresses": ["198.18.0.1"]},
        {"name": "second", "addresses": ["198.18.0.2"], "serviceAllocation": {"priority": 5}},
        {"name": "first", "addresses": ["198.18.0.3"], "serviceAllocation": {"priority": 1}}]})
    grants = allocate([claim("a", created=1), claim("b", created=2), claim("c", created=3)],
                      pools)
    assert [grants[ObjectRef("Service", "shop", n)].addresses for n in "abc"] == [
        ("198.18.0.3",), ("198.18.0.2",), ("198.18.0.1",)]


def test_a_scoped_pool_serves_only_the_namespaces_and_labels_it_names() -> None:
    """namespaces OR namespaceSelectors pick the namespace; serviceSelectors the object; an
    object outside every scope falls through to the unscoped pool."""
    pools = parse_pools({"pools": [
        {"name": "tenant", "addresses": ["198.18.1.1-198.18.1.4"], "serviceAllocation": {
            "priority": 1, "namespaces": ["shop"],
            "namespaceSelectors": [{"matchLabels": {"team": "blue"}}],
            "serviceSelectors": [{"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["public"]}]}]}},
        {"name": "rest", "addresses": ["198.18.2.1-198.18.2.4"]}]})
    public = {"tier": "public"}
    grants = allocate([
        claim("in-shop", labels=public),
        claim("blue-ns", ns="other", labels=public, namespace_labels={"team": "blue"}),
        claim("private", labels={"tier": "internal"}),
        claim("elsewhere", ns="other", labels=public)], pools)

    def pool_of(name: str, ns: str = "shop") -> str:
        (address,) = grants[ObjectRef("Service", ns, name)].addresses
        return "tenant" if address.startswith("198.18.1.") else "rest"

    assert pool_of("in-shop") == "tenant"
    assert pool_of("blue-ns", "other") == "tenant"
    assert pool_of("private") == "rest"
    assert pool_of("elsewhere", "other") == "rest"


def test_naming_or_asking_from_a_pool_out_of_scope_stays_pending() -> None:
    """As MetalLB: an object that names a pool, or asks for an address of a pool, whose scope
    excludes it gets nothing (AddressNotAllowed), not an address from elsewhere."""
    pools = parse_pools({"pools": [
        {"name": "tenant", "addresses": ["198.18.1.1"],
         "serviceAllocation": {"namespaces": ["shop"]}},
        {"name": "rest", "addresses": ["198.18.2.1"]}]})
    grants = allocate([claim("named", ns="other", pool="tenant"),
                       claim("asked", ns="other", requested=("198.18.1.1",))], pools)
    for name in ("named", "asked"):
        grant = grants[ObjectRef("Service", "other", name)]
        assert grant.pending
        assert grant.reason is Reason.ADDRESS_NOT_ALLOWED
        assert "serviceAllocation" in grant.message


def test_avoid_buggy_ips_skips_addresses_ending_in_0_and_255() -> None:
    """A /23 with avoidBuggyIPs hands out .254 then .1 of the next /24 — never .255 or .0 —
    and refuses a request for one; IPv6 is untouched."""
    pools = parse_pools({"pools": [
        {"name": "p", "addresses": ["198.18.0.254-198.18.1.1", "2001:db8::ff-2001:db8::100"],
         "avoidBuggyIPs": True}]})
    grants = allocate([claim(f"s{i}", created=i) for i in range(4)]
                      + [claim("asked", created=9, requested=("198.18.0.255",))], pools)
    got = [grants[ObjectRef("Service", "shop", f"s{i}")].addresses for i in range(4)]
    assert got == [("198.18.0.254",), ("198.18.1.1",), ("2001:db8::ff",), ("2001:db8::100",)]
    asked = grants[ObjectRef("Service", "shop", "asked")]
    assert asked.pending
    assert asked.reason is Reason.ADDRESS_NOT_ALLOWED


@pytest.mark.parametrize(("allocation", "field"), [
    ({"priority": -1}, "priority"), ({"priority": True}, "priority"),
    ({"namespaces": "shop"}, "namespaces"), ({"serviceSelectors": [{"matchLabels": 3}]},
                                             "serviceSelectors"),
    ("all", "serviceAllocation")])
def test_a_bad_allocation_is_one_line_naming_the_pool_and_field(allocation: object,
                                                                field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_pools({"pools": [{"name": "p", "addresses": ["198.18.0.1"],
                                "serviceAllocation": allocation}]})
    assert "'p'" in str(err.value)
    assert field in str(err.value)
    assert "\n" not in str(err.value)
