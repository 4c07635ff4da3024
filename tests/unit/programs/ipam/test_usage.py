"""Pool usage: sizes are counted without enumerating (avoidBuggyIPs included), and the counts
followed from one allocation to the next equal the counts of the last allocation from scratch
(shared addresses once, addresses outside every pool nowhere)."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from podway.model import ObjectRef
from podway.programs.ipam import parse_pools
from podway.programs.ipam.pools import Pool
from podway.programs.ipam.usage import INT64_MAX, Counts, PoolUsage, usable_size
from podway.translate.core.vips import VipGrant

POOLS = parse_pools({"pools": [
    {"name": "a", "addresses": ["198.18.0.0/29", "2001:db8::/125"]},
    {"name": "b", "addresses": ["198.18.1.250-198.18.2.5"], "avoidBuggyIPs": True},
    {"name": "c", "addresses": ["198.18.3.7"]},
]})
# Addresses in pools a, b and c, and two in none.
ADDRESSES = ["198.18.0.1", "198.18.0.6", "2001:db8::3", "198.18.1.251", "198.18.2.1",
             "198.18.3.7", "198.18.9.9", "2001:db8:1::1"]


def test_sizes_are_counted_without_enumerating() -> None:
    assert usable_size(POOLS[0]) == (6, 8)  # a /29 without network and broadcast; a /125
    # .250 to .5 is 12 addresses, minus 198.18.1.255 and 198.18.2.0
    assert usable_size(POOLS[1]) == (10, 0)
    for first, last in [(0, 255), (250, 1030), (256, 511), (255, 256), (1, 254)]:
        pool = Pool(name="x", ranges=parse_pools({"pools": [{"name": "x", "addresses": [
            f"{ipaddress.ip_address(first)}-{ipaddress.ip_address(last)}"]}]})[0].ranges,
            avoid_buggy_ips=True)
        assert usable_size(pool)[0] == sum(1 for _ in pool.addresses())


def test_an_ipv6_count_beyond_int64_is_capped() -> None:
    huge = parse_pools({"pools": [{"name": "v6", "addresses": ["2001:db8::/64"]}]})
    usage = PoolUsage()
    usage.update(huge, {})
    counts = usage.counts("v6")
    assert counts is not None
    assert counts.available_v6 == 2**64
    assert counts.status()["availableIPv6"] == INT64_MAX


def _from_scratch(grants: dict[ObjectRef, VipGrant]) -> dict[str, Counts | None]:
    usage = PoolUsage()
    usage.update(POOLS, grants)
    return {p.name: usage.counts(p.name) for p in POOLS}


def _expected(grants: dict[ObjectRef, VipGrant]) -> dict[str, tuple[int, int]]:
    held = {ipaddress.ip_address(a) for g in grants.values() for a in g.addresses}
    return {p.name: (sum(1 for a in held if a in p and a.version == 4),
                     sum(1 for a in held if a in p and a.version == 6)) for p in POOLS}


grant_maps = st.dictionaries(
    st.sampled_from([ObjectRef("Service", "ns", f"s{i}") for i in range(6)]),
    st.lists(st.sampled_from(ADDRESSES), max_size=2, unique=True).map(
        lambda a: VipGrant(addresses=tuple(a))),
    max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(grant_maps, min_size=1, max_size=8))
def test_counts_follow_the_change_as_from_scratch(sequence: list[dict[ObjectRef, VipGrant]]
                                                  ) -> None:
    usage = PoolUsage()
    before = {p.name: usage.counts(p.name) for p in POOLS}
    for grants in sequence:
        changed = usage.update(POOLS, grants)
        now = {p.name: usage.counts(p.name) for p in POOLS}
        assert now == _from_scratch(grants)
        assert {n: (c.assigned_v4, c.assigned_v6) for n, c in now.items() if c} == \
            _expected(grants)
        assert {n for n in now if now[n] != before[n]} <= changed
        before = now


def test_new_pools_count_again() -> None:
    grants = {ObjectRef("Service", "ns", "s"): VipGrant(addresses=("198.18.3.7",))}
    usage = PoolUsage()
    usage.update(POOLS[:2], grants)
    assert usage.counts("c") is None
    assert usage.update(POOLS, grants) == {"c"}
    assert usage.counts("c") == Counts(1, 0, 0, 0)


def test_automatic_allocation_looks_at_each_address_once(monkeypatch: object) -> None:
    """N Services drawing automatically from one pool: each pick goes on from the last one, so
    about N addresses are looked at, not N²/2 (300 claims: ~45,000 before)."""
    import importlib

    import pytest

    from podway.programs.ipam import Claim

    module = importlib.import_module("podway.programs.ipam.allocate")

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    looked = 0

    class Counting(dict):  # type: ignore[type-arg]
        def __contains__(self, key: object) -> bool:
            nonlocal looked
            looked += 1
            return super().__contains__(key)

    init = module._Table.__init__

    def counting_init(self: module._Table) -> None:
        init(self)
        self.holders = Counting()

    monkeypatch.setattr(module._Table, "__init__", counting_init)
    pools = parse_pools({"pools": [{"name": "big", "addresses": ["198.18.0.0/22"],
                                    "avoidBuggyIPs": True}]})
    claims = [Claim(ref=ObjectRef("Service", "ns", f"s{i}"), created=float(i), uid=f"u{i}")
              for i in range(300)]
    grants = module.allocate(claims, pools)
    addresses = [ipaddress.ip_address(g.addresses[0]) for g in grants.values()]
    assert len(set(addresses)) == 300  # every Service its own, .0 and .255 avoided
    assert not any(int(a) & 0xFF in (0, 255) for a in addresses)
    assert looked <= 3 * 300
