"""L2 mode as MetalLB's L2Advertisements say: a VIP is a host's to own only when an
advertisement selects both its pool and the host's Node, on the advertisements' interfaces; the
hosts tell each other what they may own, so each VIP is elected among those only (and a peer
that says nothing about it, an older speaker, may own everything)."""

from __future__ import annotations

from typing import Any

from podway.programs.vip.l2 import Heartbeat, L2Settings, L2Speaker, decode, encode, owner
from podway.programs.vip.metallb import Objects
from podway.programs.vip.metallb_l2 import placement

KEY = b"k" * 32
A1, A2, B1 = "198.18.90.100", "198.18.90.101", "198.18.91.1"


def objects(*items: tuple[str, str, dict[str, Any], dict[str, str]]) -> Objects:
    out = Objects()
    for kind, name, spec, labels in items:
        out.by_kind[kind][name] = {"metadata": {"name": name, "labels": labels}, "spec": spec}
    return out


WORLD = objects(
    ("IPAddressPool", "a", {"addresses": [f"{A1}-{A2}"]}, {}),
    ("IPAddressPool", "b", {"addresses": [f"{B1}/32"]}, {"zone": "x"}),
    ("L2Advertisement", "rack-a", {"ipAddressPools": ["a"], "interfaces": ["e1"],
                                   "nodeSelectors": [{"matchLabels": {"rack": "a"}}]}, {}),
    ("L2Advertisement", "zone-x", {"ipAddressPoolSelectors": [{"matchLabels": {"zone": "x"}}]},
     {}),
    ("L2Advertisement", "rack-b", {"ipAddressPools": ["a"], "interfaces": ["e2", "e3"],
                                   "nodeSelectors": [{"matchLabels": {"rack": "b"}}]}, {}),
    ("L2Advertisement", "broken", {"nodeSelectors": "rack=a"}, {}))


def test_placement_follows_node_selectors_pools_and_interfaces() -> None:
    vips = [A1, A2, B1, "198.18.99.9"]
    on_a, problems = placement(WORLD, node_labels={"rack": "a"}, vips=vips)
    assert on_a == {A1: ("e1",), A2: ("e1",), B1: ()}  # (): the speaker's --interface
    assert "L2Advertisement 'broken' is not used" in "\n".join(problems)
    assert "VIP 198.18.99.9 is in no IPAddressPool" in "\n".join(problems)
    on_b, _ = placement(WORLD, node_labels={"rack": "b"}, vips=vips)
    assert on_b == {A1: ("e2", "e3"), A2: ("e2", "e3"), B1: ()}
    on_c, _ = placement(WORLD, node_labels={"rack": "c"}, vips=vips)
    assert on_c == {B1: ()}  # pool a is advertised on racks a and b only


def speaker(node: str, serves: dict[str, tuple[str, ...]] | None) -> L2Speaker:
    return L2Speaker(L2Settings(node=node, interface="e0", listen=("198.18.0.1", 7000),
                                peers={"b": ("198.18.0.2", 7000)}, vips=(A1, A2, B1), key=KEY,
                                placement=serves))


def test_each_vip_is_elected_among_the_hosts_that_may_own_it() -> None:
    """a may own only A1 (on e1); b says it may own A1 and B1: A2 has no owner, B1 is b's
    whatever the hash says, A1 goes to whichever of the two the hash picks."""
    a = speaker("a", {A1: ("e1",)})
    a.members.hear(Heartbeat("b", healthy=True, sent=1.0, serves=(A1, B1)), at=100.0)
    wanted = a.wanted(100.1)
    assert wanted == ({A1} if owner(A1, ["a", "b"]) == "a" else set())
    assert a.interfaces(A1) == ("e1",)
    # b silent: a takes what it may own, nothing else
    assert a.wanted(101.0) == {A1}
    # an older peer that says nothing about what it serves may own everything
    old = speaker("a", {A1: ("e1",)})
    old.members.hear(Heartbeat("b", healthy=True, sent=1.0), at=100.0)
    assert old.wanted(100.1) == ({A1} if owner(A1, ["a", "b"]) == "a" else set())
    # no placement at all (not --from-metallb): every VIP, on --interface
    free = speaker("a", None)
    assert free.wanted(101.0) == {A1, A2, B1}
    assert free.interfaces(A2) == ("e0",)
    # placement read but empty: nothing
    assert speaker("a", {}).wanted(101.0) == set()


def test_heartbeats_carry_what_their_sender_may_own() -> None:
    beat = Heartbeat("a", healthy=True, sent=1000.0, serves=(A1,))
    assert decode(encode(beat, KEY), KEY, now=1000.5) == beat
    plain = Heartbeat("a", healthy=True, sent=1000.0)
    assert decode(encode(plain, KEY), KEY, now=1000.5) == plain
    assert b"serves" not in encode(plain, KEY)  # an older speaker reads it as before


def test_with_quorum_the_minority_side_of_a_split_owns_nothing() -> None:
    """Three hosts: a hearing b (a majority of 2 of 3) owns its share; a hearing nobody owns
    nothing (without --quorum it would take every VIP, as MetalLB does)."""
    def three(quorum: bool) -> L2Speaker:
        return L2Speaker(L2Settings(node="a", interface="e0", listen=("198.18.0.1", 7000),
                                    peers={"b": ("198.18.0.2", 7000),
                                           "c": ("198.18.0.3", 7000)},
                                    vips=(A1, A2, B1), key=KEY, quorum=quorum))
    a = three(True)
    a.members.hear(Heartbeat("b", healthy=True, sent=1.0), at=100.0)
    assert a.wanted(100.1) == {v for v in (A1, A2, B1) if owner(v, ["a", "b"]) == "a"}
    assert a.wanted(101.0) == set()  # b silent too: a is alone, the minority
    assert three(False).wanted(101.0) == {A1, A2, B1}
    # an unhealthy peer still counts toward the majority (it is reachable, just not serving)
    a.members.hear(Heartbeat("b", healthy=False, sent=2.0), at=200.0)
    assert a.wanted(200.1) == {A1, A2, B1}


def test_quorum_with_one_peer_is_refused_in_one_line() -> None:
    from podway.base.errors import ConfigError
    from podway.cli.app import app
    from tests.unit.programs.vip.test_configs import runner

    bad = runner.invoke(app, ["vip", "l2", "--node", "a", "--interface", "e0", "--listen",
                              "198.18.0.1:7946", "--peer", "b=198.18.0.2:7946", "--vip", A1,
                              "--key-file", "/nonexistent", "--quorum"])
    assert isinstance(bad.exception, ConfigError)
    assert "--quorum needs at least 2 --peer" in str(bad.exception)
