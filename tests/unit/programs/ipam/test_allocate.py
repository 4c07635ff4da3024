"""The allocator: requests, status recovery, sharing, pools by annotation or engine group,
exhaustion, and the properties every allocation keeps (one owner per address, order-free,
stable across restarts, released addresses reused)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from podway.model import ObjectRef
from podway.programs.ipam import Claim, allocate, parse_pools
from podway.translate.core.problems import Reason
from podway.translate.core.vips import VipGrant

POOLS = parse_pools({"pools": [
    {"name": "main", "addresses": ["198.18.0.1-198.18.0.3"]},
    {"name": "v6", "addresses": ["2001:db8::1-2001:db8::2"], "autoAssign": False},
    {"name": "edge", "addresses": ["198.18.9.1"], "engineGroup": "edge-a"},
]})


def claim(name: str, created: float = 0.0, **kw: object) -> Claim:
    return Claim(ref=ObjectRef("Service", "ns", name), created=created, uid=f"uid-{name}",
                 ports=kw.pop("ports", frozenset({("TCP", 80)})), **kw)  # type: ignore[arg-type]


def addresses(grants: dict[ObjectRef, VipGrant], name: str) -> tuple[str, ...]:
    return grants[ObjectRef("Service", "ns", name)].addresses


def test_automatic_takes_the_first_free_address_oldest_first() -> None:
    """Oldest first, in pool order; a pool with autoAssign false is never drawn from."""
    g = allocate([claim("b", 2), claim("a", 1)], POOLS)
    assert addresses(g, "a") == ("198.18.0.1",)
    assert addresses(g, "b") == ("198.18.0.2",)


def test_requested_address_is_honoured_and_must_be_in_a_pool() -> None:
    """A requested pool address is granted (also from a non-auto pool); one outside every pool
    leaves the object pending with AddressNotInPool."""
    g = allocate([claim("a", requested=("2001:db8::2",), requested_field="spec.loadBalancerIP"),
                  claim("b", requested=("203.0.113.1",), requested_field="spec.loadBalancerIP")],
                 POOLS)
    assert addresses(g, "a") == ("2001:db8::2",)
    b = g[ObjectRef("Service", "ns", "b")]
    assert b.pending
    assert b.reason is Reason.ADDRESS_NOT_IN_POOL
    assert b.field == "spec.loadBalancerIP"


def test_every_requested_address_is_granted() -> None:
    """A dual-stack or multi-address request gets all of its addresses."""
    g = allocate([claim("a", requested=("198.18.0.2", "2001:db8::1"))], POOLS)
    assert addresses(g, "a") == ("198.18.0.2", "2001:db8::1")


def test_held_address_survives_a_restart_and_a_new_object_cannot_take_it() -> None:
    """The status address is kept even when an older object is allocated automatically."""
    g = allocate([claim("old", 1), claim("young", 2, held=("198.18.0.1",))], POOLS)
    assert addresses(g, "young") == ("198.18.0.1",)
    assert addresses(g, "old") == ("198.18.0.2",)


def test_conflict_goes_to_the_oldest_then_the_lowest_uid() -> None:
    """Two objects asking for one address: the older gets it, the other is AddressInUse;
    with equal timestamps the lower uid wins."""
    g = allocate([claim("b", 5, requested=("198.18.0.3",)),
                  claim("a", 9, requested=("198.18.0.3",))], POOLS)
    assert addresses(g, "b") == ("198.18.0.3",)
    assert g[ObjectRef("Service", "ns", "a")].reason is Reason.ADDRESS_IN_USE
    g = allocate([replace(claim("x", 1, requested=("198.18.0.3",)), uid="2"),
                  replace(claim("y", 1, requested=("198.18.0.3",)), uid="1")], POOLS)
    assert addresses(g, "y") == ("198.18.0.3",)
    assert not addresses(g, "x")


def test_sharing_needs_the_same_key_and_disjoint_ports() -> None:
    """Same key, disjoint ports: one VIP; a port clash or another key: a separate address."""
    g = allocate([claim("dns-tcp", 1, share="dns", ports=frozenset({("TCP", 53)})),
                  claim("dns-udp", 2, share="dns", ports=frozenset({("UDP", 53)})),
                  claim("clash", 3, share="dns", ports=frozenset({("UDP", 53)})),
                  claim("other", 4, share="web", ports=frozenset({("TCP", 80)}))], POOLS)
    assert addresses(g, "dns-tcp") == addresses(g, "dns-udp") == ("198.18.0.1",)
    assert addresses(g, "clash") == ("198.18.0.2",)
    assert addresses(g, "other") == ("198.18.0.3",)


def test_requested_shared_address_without_key_is_in_use() -> None:
    """Asking for a held address without the sharing key is refused (AddressInUse)."""
    g = allocate([claim("a", 1, requested=("198.18.0.1",)),
                  claim("b", 2, requested=("198.18.0.1",), ports=frozenset({("TCP", 81)}))],
                 POOLS)
    assert g[ObjectRef("Service", "ns", "b")].reason is Reason.ADDRESS_IN_USE


def test_pool_by_annotation_and_by_engine_group() -> None:
    """podway.io/vip-pool picks the pool (also a non-auto one); an engine group draws only from
    its pools; an unknown pool is UnknownPool."""
    g = allocate([claim("a", pool="v6"), claim("b", engine_group="edge-a"),
                  claim("c", pool="nope"), claim("d", engine_group="edge-b")], POOLS)
    assert addresses(g, "a") == ("2001:db8::1",)
    assert addresses(g, "b") == ("198.18.9.1",)
    assert g[ObjectRef("Service", "ns", "c")].reason is Reason.UNKNOWN_POOL
    assert g[ObjectRef("Service", "ns", "d")].reason is Reason.POOL_EXHAUSTED


def test_requested_address_outside_the_named_pool_is_refused() -> None:
    """A request and a pool annotation that disagree leave the object pending."""
    g = allocate([claim("a", pool="edge", requested=("198.18.0.1",))], POOLS)
    assert g[ObjectRef("Service", "ns", "a")].reason is Reason.ADDRESS_NOT_IN_POOL


def test_exhaustion_is_pending_and_a_release_serves_it() -> None:
    """The fourth object waits (PoolExhausted); once an owner is gone it gets the address."""
    claims = [claim(n, i) for i, n in enumerate("abcd")]
    g = allocate(claims, POOLS)
    d = g[ObjectRef("Service", "ns", "d")]
    assert d.pending
    assert d.reason is Reason.POOL_EXHAUSTED
    held = [replace(c, held=addresses(g, c.ref.name)) for c in claims]
    g2 = allocate([c for c in held if c.ref.name != "b"], POOLS)
    assert addresses(g2, "d") == ("198.18.0.2",)
    assert addresses(g2, "a") == ("198.18.0.1",)
    assert addresses(g2, "c") == ("198.18.0.3",)


def test_invalid_request_is_pending_with_invalid_address() -> None:
    """A request that is not an address: InvalidAddress, nothing bound."""
    g = allocate([claim("a", invalid="'x' is not an IP address", requested_field="f")], POOLS)
    grant = g[ObjectRef("Service", "ns", "a")]
    assert grant.pending
    assert grant.reason is Reason.INVALID_ADDRESS


MIXED = parse_pools({"pools": [
    {"name": "dual", "addresses": ["198.18.0.1-198.18.0.2", "2001:db8::1"]}]})


def test_dual_stack_gets_one_address_per_family() -> None:
    """PreferDualStack/RequireDualStack get an IPv4 and an IPv6 VIP, in spec.ipFamilies order;
    SingleStack IPv6 gets IPv6 from a mixed pool."""
    g = allocate([claim("dual", 1, families=(6, 4), all_families=True),
                  claim("v4", 2, families=(4,))], MIXED)
    assert addresses(g, "dual") == ("2001:db8::1", "198.18.0.1")
    assert addresses(g, "v4") == ("198.18.0.2",)
    g = allocate([claim("v6", 1, families=(6,))], MIXED)
    assert addresses(g, "v6") == ("2001:db8::1",)


def test_dual_stack_when_a_family_is_exhausted() -> None:
    """The IPv6 address taken: PreferDualStack settles for IPv4, RequireDualStack waits (and
    takes nothing meanwhile)."""
    g = allocate([claim("first", 1, families=(6,)),
                  claim("prefer", 2, families=(4, 6)),
                  claim("require", 3, families=(4, 6), all_families=True),
                  claim("later", 4)], MIXED)
    assert addresses(g, "prefer") == ("198.18.0.1",)
    required = g[ObjectRef("Service", "ns", "require")]
    assert required.pending
    assert required.reason is Reason.POOL_EXHAUSTED
    assert addresses(g, "later") == ("198.18.0.2",)  # the pending one held nothing back


# --- properties -------------------------------------------------------------------------------

SMALL = parse_pools({"pools": [
    {"name": "p", "addresses": ["198.18.0.1-198.18.0.4", "2001:db8:1::1-2001:db8:1::2"]},
    {"name": "q", "addresses": ["2001:db8::1-2001:db8::2"], "engineGroup": "g"},
]})
ADDRS = ["198.18.0.1", "198.18.0.2", "198.18.0.4", "198.18.0.9", "2001:db8::2"]


@st.composite
def claims(draw: st.DrawFn) -> list[Claim]:
    n = draw(st.integers(0, 9))
    out = []
    for i in range(n):
        out.append(Claim(
            ref=ObjectRef(draw(st.sampled_from(["Service", "Gateway"])), "ns", f"o{i}"),
            created=draw(st.sampled_from([1.0, 2.0, float("inf")])),
            uid=f"{draw(st.integers(0, 3))}",
            requested=tuple(draw(st.lists(st.sampled_from(ADDRS), max_size=2))),
            held=tuple(draw(st.lists(st.sampled_from(ADDRS), max_size=1))),
            pool=draw(st.sampled_from([None, None, "p", "q", "x"])),
            engine_group=draw(st.sampled_from([None, None, "g"])),
            share=draw(st.sampled_from([None, "k", "j"])),
            families=draw(st.sampled_from([(), (4,), (6,), (4, 6), (6, 4)])),
            all_families=draw(st.booleans()),
            ports=frozenset(draw(st.lists(st.tuples(st.sampled_from(["TCP", "UDP"]),
                                                    st.integers(1, 3)), min_size=1,
                                          max_size=2)))))
    return out


def owners_ok(cs: list[Claim], grants: dict[ObjectRef, VipGrant]) -> bool:
    by_ref = {c.ref: c for c in cs}
    holders: dict[str, list[Claim]] = {}
    for ref, grant in grants.items():
        for a in grant.addresses:
            holders.setdefault(a, []).append(by_ref[ref])
    for hs in holders.values():
        if len(hs) == 1:
            continue
        if any(h.share is None or h.share != hs[0].share for h in hs):
            return False
        for i, h in enumerate(hs):
            if any(not h.ports.isdisjoint(o.ports) for o in hs[i + 1:]):
                return False
    return True


@settings(max_examples=300, deadline=None)
@given(claims(), st.randoms())
def test_no_address_has_two_owners_and_order_does_not_matter(cs: list[Claim], rnd: object) -> None:
    """Every address has one owner (or sharers with one key and disjoint ports), every claim
    gets a grant, and shuffling the input changes nothing."""
    grants = allocate(cs, SMALL)
    assert set(grants) == {c.ref for c in cs}
    assert owners_ok(cs, grants)
    shuffled = list(cs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert allocate(shuffled, SMALL) == grants


@settings(max_examples=300, deadline=None)
@given(claims())
def test_restart_from_status_is_stable(cs: list[Claim]) -> None:
    """Feeding the granted addresses back as status (a restart) yields the same grants."""
    grants = allocate(cs, SMALL)
    restarted = [replace(c, held=grants[c.ref].addresses) for c in cs]
    again = allocate(restarted, SMALL)
    assert {r: g.addresses for r, g in again.items()} == {r: g.addresses for r, g in grants.items()}


@settings(max_examples=300, deadline=None)
@given(claims(), st.data())
def test_release_keeps_the_others_and_frees_the_address(cs: list[Claim],
                                                        data: st.DataObject) -> None:
    """Deleting an object keeps every other grant and frees its addresses for reuse."""
    if not cs:
        return
    grants = allocate(cs, SMALL)
    gone = data.draw(st.sampled_from(cs))
    rest = [replace(c, held=grants[c.ref].addresses) for c in cs if c is not gone]
    after = allocate(rest, SMALL)
    for c in rest:
        if grants[c.ref].addresses:
            assert after[c.ref].addresses == grants[c.ref].addresses
    taken = {a for g in after.values() for a in g.addresses}
    freed = set(grants[gone.ref].addresses) - taken
    newcomer = Claim(ref=ObjectRef("Service", "ns", "new"), created=99.0, uid="z",
                     requested=tuple(sorted(freed))[:1], ports=frozenset({("TCP", 9)}))
    if newcomer.requested:
        assert allocate([*rest, newcomer], SMALL)[newcomer.ref].addresses == newcomer.requested



def _c(name: str, uid: str = "0", **kw: object) -> Claim:
    return Claim(ref=ObjectRef("Service", "ns", name), created=1.0, uid=uid,
                 ports=frozenset({("TCP", 1)}), **kw)  # type: ignore[arg-type]


def test_a_pending_request_is_not_handed_out_and_a_held_vip_is_never_taken() -> None:
    """o3 asks for .1 and .4 while .1 is held: it waits, and .4 is kept for it (not given to a
    newer object); once .1 is free it gets both, and nobody else's VIP moves."""
    cs = [_c("o3", uid="1", requested=("198.18.0.1", "198.18.0.4")),
          _c("o4", held=("198.18.0.1",)), _c("o6", uid="1"), _c("o0"), _c("o5")]
    first = allocate(cs, SMALL)
    assert first[cs[0].ref].addresses == ()
    assert "198.18.0.4" not in first[cs[2].ref].addresses
    rest = [replace(c, held=first[c.ref].addresses) for c in cs if c.ref.name != "o4"]
    after = allocate(rest, SMALL)
    assert after[cs[0].ref].addresses == ("198.18.0.1", "198.18.0.4")
    assert after[cs[2].ref].addresses == first[cs[2].ref].addresses


def test_a_sharer_keeps_the_vip_it_asked_for_when_the_first_holder_goes() -> None:
    """o6 shares .1 (same key, other port) with o2; an older o4 asking for .1 without the key
    waits. When o2 is deleted, o6 keeps .1 and o4 still waits."""
    o2 = _c("o2", held=("198.18.0.1",), share="k")
    o4 = _c("o4", requested=("198.18.0.1",))
    o6 = replace(_c("o6", requested=("198.18.0.1",), share="k"), ports=frozenset({("TCP", 2)}))
    first = allocate([o2, o4, o6], SMALL)
    assert first[o6.ref].addresses == ("198.18.0.1",)
    assert first[o4.ref].addresses == ()
    after = allocate([replace(o4, held=()), replace(o6, held=("198.18.0.1",))], SMALL)
    assert after[o6.ref].addresses == ("198.18.0.1",)
    assert after[o4.ref].addresses == ()
