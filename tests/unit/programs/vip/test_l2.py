"""L2 mode's pure parts: signed heartbeats (forged, stale and unknown ones ignored), the
per-VIP election (deterministic, spread, only a dead host's VIPs move), who holds what when
unhealthy or leaving, and the announcement packets as the wire defines them."""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections import Counter

import pytest

from podway.base.errors import ConfigError
from podway.programs.vip.l2 import (
    Heartbeat,
    L2Settings,
    L2Speaker,
    Membership,
    check_vips,
    decode,
    encode,
    garp_frames,
    owner,
    parse_peer,
    sockaddr,
    unsolicited_na,
)
from podway.programs.vip.l2_addr import has_local_route

KEY = b"k" * 32
VIPS = tuple(f"198.18.80.{i}" for i in range(1, 61))


def test_heartbeats_need_the_key_and_a_recent_clock() -> None:
    beat = Heartbeat("a", healthy=True, sent=1000.0)
    assert decode(encode(beat, KEY), KEY, now=1001.0) == beat
    assert decode(encode(beat, b"x" * 32), KEY, now=1001.0) is None  # another key
    forged = bytearray(encode(beat, KEY))
    forged[-5] ^= 1
    assert decode(bytes(forged), KEY, now=1001.0) is None  # altered
    assert decode(encode(beat, KEY), KEY, now=1010.0) is None  # replayed later
    assert decode(b"short", KEY, now=0) is None


def test_the_election_spreads_vips_and_moves_only_a_dead_host_s() -> None:
    """Every host computes the same owners; three hosts share 60 VIPs; when c dies only c's
    VIPs move; nobody alive: no owner."""
    three = {v: owner(v, ["a", "b", "c"]) for v in VIPS}
    assert three == {v: owner(v, ["c", "b", "a"]) for v in VIPS}
    assert min(Counter(three.values()).values()) >= 10
    two = {v: owner(v, ["a", "b"]) for v in VIPS}
    assert {v for v in VIPS if two[v] != three[v]} == {v for v in VIPS if three[v] == "c"}
    assert owner(VIPS[0], []) is None


def test_a_replayed_heartbeat_is_not_taken() -> None:
    """Only a heartbeat newer than its sender's last counts: a captured one sent again (within
    the 5 s window the signature check allows) cannot keep a dead host alive."""
    members = Membership(dead_after_s=0.6)
    beat = Heartbeat("a", healthy=True, sent=100.0)
    assert members.hear(beat, at=10.0)
    assert not members.hear(beat, at=10.7)
    assert members.candidates(10.8) == set()
    assert members.hear(Heartbeat("a", healthy=True, sent=100.2), at=10.8)
    assert members.candidates(10.8) == {"a"}


def test_membership_drops_the_silent_the_unhealthy_and_the_leaving() -> None:
    members = Membership(dead_after_s=0.6)
    members.hear(Heartbeat("a", healthy=True, sent=1.0), at=10.0)
    members.hear(Heartbeat("b", healthy=False, sent=1.0), at=10.0)
    members.hear(Heartbeat("c", healthy=True, leaving=True, sent=1.0), at=10.0)
    members.hear(Heartbeat("d", healthy=True, sent=1.0), at=9.0)
    assert members.candidates(10.5) == {"a"}
    assert members.candidates(10.7) == set()


def settings(node: str) -> L2Settings:
    return L2Settings(node=node, interface="eth0", listen=("198.18.0.1", 7000),
                      peers={"b": ("198.18.0.2", 7000)}, vips=VIPS, key=KEY)


def test_a_host_wants_its_share_and_nothing_once_unhealthy_or_leaving() -> None:
    speaker = L2Speaker(settings("a"))
    speaker.members.hear(Heartbeat("b", healthy=True), at=100.0)
    mine = {v for v in VIPS if owner(v, ["a", "b"]) == "a"}
    assert speaker.wanted(100.1) == mine
    assert speaker.wanted(101.0) == set(VIPS)  # b went silent: a takes everything
    speaker.engine_ok = False
    assert speaker.wanted(100.1) == set()
    speaker.engine_ok, speaker.leaving = True, True
    assert speaker.wanted(100.1) == set()


def test_gratuitous_arp_frames_announce_the_vip_at_the_mac() -> None:
    mac = bytes.fromhex("020000000001")
    vip = ipaddress.IPv4Address("198.18.80.1")
    request, reply = garp_frames(mac, vip)
    for frame, op in ((request, 1), (reply, 2)):
        assert frame[:6] == b"\xff" * 6
        assert frame[6:12] == mac
        assert frame[12:14] == b"\x08\x06"
        htype, ptype, hlen, plen, got_op, sha, spa, _, tpa = struct.unpack(
            "!HHBBH6s4s6s4s", frame[14:42])
        assert (htype, ptype, hlen, plen, got_op) == (1, 0x0800, 6, 4, op)
        assert (sha, spa, tpa) == (mac, vip.packed, vip.packed)


def test_neighbor_advertisement_overrides_with_the_target_link_address() -> None:
    mac = bytes.fromhex("020000000001")
    vip = ipaddress.IPv6Address("2001:db8::80")
    packet = unsolicited_na(mac, vip)
    kind, code, _, flags = struct.unpack("!BBHI", packet[:8])
    assert (kind, code) == (136, 0)
    assert flags & 0x20000000  # override
    assert not flags & 0xC0000000  # neither router nor solicited
    assert packet[8:24] == vip.packed
    assert packet[24:32] == b"\x02\x01" + mac


def test_a_link_local_vip_is_taken_without_a_zone() -> None:
    """fe80::100 is a VIP like any other (it goes on --interface); with a %zone it is refused
    in one line, not by ``ip addr add`` once the host is elected."""
    assert check_vips(["fe80::100", "198.18.0.9"]) == ("fe80::100", "198.18.0.9")
    with pytest.raises(ConfigError, match="without %zone"):
        check_vips(["fe80::100%e0"])
    with pytest.raises(ConfigError, match="not an IP address"):
        check_vips(["fe80::100/64"])


def test_a_link_local_peer_keeps_its_zone_as_a_socket_address() -> None:
    """A socket drops the %zone of a 2-tuple: a link-local --listen or --peer needs the scope
    in a 4-tuple, or it binds (EINVAL) and sends nowhere."""
    lo = socket.if_nametoindex("lo")
    assert sockaddr(parse_peer("b=[fe80::12%lo]:7946")[1]) == ("fe80::12", 7946, 0, lo)
    assert sockaddr(("fe80::12%1", 7946)) == ("fe80::12", 7946, 0, 1)
    assert sockaddr(("198.18.0.2", 7946)) == ("198.18.0.2", 7946)


@pytest.mark.parametrize("text", ["b", "b=198.18.0.2", "=198.18.0.2:7000",
                                  "b=nothost:7000", "b=198.18.0.2:0"])
def test_a_bad_peer_is_one_line(text: str) -> None:
    with pytest.raises(ConfigError, match="NAME=ADDRESS:PORT"):
        parse_peer(text)
    assert parse_peer("b=[2001:db8::2]:7000") == ("b", ("2001:db8::2", 7000))


def test_a_vip_being_lost_is_kept_until_the_new_owner_holds_it() -> None:
    """A host whose engine stops being ready (or whose VIP the hash gives to a newcomer) keeps
    the VIP until the new owner's heartbeat says it holds it, or hand_over_s at most; with no
    live peer that may take it, it lets go at once."""
    speaker = L2Speaker(settings("a"))
    vip = next(v for v in VIPS if owner(v, ["a", "b"]) == "a")
    speaker.held = {vip}
    speaker.members.hear(Heartbeat("b", healthy=True, sent=1.0), at=100.0)
    assert vip in speaker.wanted(100.1)
    speaker.engine_ok = False
    assert speaker.wanted(100.2) == set()
    assert speaker.keeping(set(), 100.2) == {vip}  # b does not hold it yet
    assert speaker.keeping(set(), 100.5) == {vip}
    speaker.members.hear(Heartbeat("b", healthy=True, sent=2.0, holds=(vip,)), at=100.6)
    assert speaker.keeping(set(), 100.6) == set()  # b announced it: let go
    # no answer from b within hand_over_s (1 s): let go anyway
    late = L2Speaker(settings("a"))
    late.held, late.engine_ok = {vip}, False
    late.members.hear(Heartbeat("b", healthy=True, sent=1.0), at=100.0)
    assert late.keeping(set(), 100.1) == {vip}
    late.members.hear(Heartbeat("b", healthy=True, sent=2.0), at=101.0)
    assert late.keeping(set(), 101.2) == set()
    # nobody alive to take it: at once
    alone = L2Speaker(settings("a"))
    alone.held, alone.engine_ok = {vip}, False
    assert alone.keeping(set(), 100.0) == set()


def test_the_local_route_of_a_vip_is_found_in_ip_s_listing() -> None:
    listing = ("local fe80::11 proto kernel metric 0 pref medium\n"
               "local fe80::100 proto kernel metric 0 pref medium\n")
    assert has_local_route(listing, "fe80::100")
    assert not has_local_route(listing, "fe80::101")
    assert not has_local_route("", "fe80::100")
    assert not has_local_route("multicast ff00::/8 proto kernel metric 256 pref medium",
                               "ff00::")


async def test_an_ipv6_vip_is_announced_and_reported_held_only_once_the_kernel_takes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel takes packets for a new IPv6 address only once its address work has put in
    the local route (later than ``ip addr add`` returns on a busy host): the speaker announces
    the VIP, and its heartbeats say it holds it, only then; meanwhile they say it is taking it
    (the first one at once). An IPv4 VIP is not waited for."""
    from podway.programs.vip import l2, l2_addr

    events: list[str] = []
    routes = iter([False, False, True])
    speaker = L2Speaker(settings("a"))

    async def ip(*args: str, may_fail: bool = False) -> None:
        events.append("ip " + " ".join(args[:2]))

    async def local_route(vip: str, interface: str) -> bool:
        found = next(routes)
        events.append(f"route {found}")
        return found

    def announce(interface: str, mac: bytes, address: object) -> None:
        events.append(f"announce {address}")

    def beat() -> None:
        events.append(f"beat holds={sorted(speaker.held)} claims={sorted(speaker.claiming)}")

    monkeypatch.setattr(l2, "_ip", ip)
    monkeypatch.setattr(l2_addr, "local_route", local_route)
    monkeypatch.setattr(l2, "_send_announcement", announce)
    monkeypatch.setattr(l2, "_mac", lambda interface: b"\x02" * 6)
    monkeypatch.setattr(speaker, "_send", beat)
    await speaker._reconcile({"fe80::100"})
    assert events[:6] == ["beat holds=[] claims=['fe80::100']", "ip addr add", "route False",
                          "route False", "route True", "announce fe80::100"]
    assert speaker.held == {"fe80::100"}
    assert speaker.claiming == set()
    events.clear()
    await speaker._reconcile({"fe80::100", "198.18.80.1"})
    assert "route" not in " ".join(events)  # IPv4: usable when ip returns
    assert events[1:3] == ["ip addr add", "announce 198.18.80.1"]


def test_a_vip_a_live_peer_is_taking_is_kept_longer() -> None:
    """A host losing a VIP keeps it past hand_over_s while a live peer's heartbeat says it is
    taking it (its address not usable yet), up to CLAIM_FACTOR times; a claim of a dead peer
    does not count. Claims go over the wire."""
    from podway.programs.vip.l2 import CLAIM_FACTOR

    vip = next(v for v in VIPS if owner(v, ["a", "b"]) == "a")
    beat = Heartbeat("b", healthy=True, sent=1.0, claims=(vip,))
    assert decode(encode(beat, KEY), KEY, now=1.0) == beat
    speaker = L2Speaker(settings("a"))
    speaker.held, speaker.engine_ok = {vip}, False
    speaker.members.hear(beat, at=100.0)
    assert speaker.keeping(set(), 100.0) == {vip}
    for t in (100.4, 100.5):  # b keeps saying it is taking it: kept past hand_over_s (1 s)
        speaker.members.hear(Heartbeat("b", healthy=True, sent=t, claims=(vip,)), at=t + 1)
    assert speaker.keeping(set(), 101.5) == {vip}
    end = 100.0 + CLAIM_FACTOR * 1.0
    speaker.members.hear(Heartbeat("b", healthy=True, sent=end, claims=(vip,)), at=end - 0.1)
    assert speaker.keeping(set(), end - 0.05) == {vip}
    assert speaker.keeping(set(), end) == set()  # at most that long
    silent = L2Speaker(settings("a"))
    silent.held, silent.engine_ok = {vip}, False
    silent.members.hear(Heartbeat("b", healthy=True, sent=1.0), at=100.0)
    assert silent.keeping(set(), 100.0) == {vip}
    silent.members.hear(Heartbeat("b", healthy=True, sent=2.0), at=101.0)
    assert silent.keeping(set(), 101.2) == set()  # no claim: hand_over_s
