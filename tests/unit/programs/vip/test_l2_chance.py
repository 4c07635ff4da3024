"""L2 second chance (podway.programs.vip.l2_chance) and the speaker's use of it; the packets
themselves are in tests/integration/vip/test_l2_chance.py."""

from __future__ import annotations

import json

import pytest

from podway.programs.vip import l2, l2_addr, l2_chance
from podway.programs.vip.l2 import Heartbeat, L2Settings, L2Speaker, decode, encode
from podway.programs.vip.l2_chance import HandBack, L2Chance, own_address, ruleset
from podway.programs.vip.secondchance import STRAY, SecondChance
from podway.programs.vip.secondchance import ruleset as bgp_ruleset

KEY = b"k" * 32


def test_the_ruleset_passes_strays_of_each_vip_to_its_old_owner_per_family() -> None:
    text = ruleset([HandBack("fe80::100", "fe80::11", "e0", "b"),
                    HandBack("198.18.90.100", "198.18.90.11", "e0", "b")])
    assert (f'ip daddr 198.18.90.100 {STRAY} counter dup to 198.18.90.11 device "e0" drop'
            in text)
    assert f'ip6 daddr fe80::100 {STRAY} counter dup to fe80::11 device "e0" drop' in text
    assert "priority mangle" in text  # after conntrack's lookup (-200)
    assert STRAY in bgp_ruleset(SecondChance(vips=("198.18.90.100",), ports=(), local="198.18.0.1",
                                             peer="198.18.0.2"))  # one match for both


def test_no_hand_back_leaves_no_table_and_bad_input_never_reaches_nft() -> None:
    empty = ruleset([])
    assert "chain" not in empty
    assert "delete table ip podway_l2_chance" in empty
    assert "delete table ip6 podway_l2_chance" in empty
    for bad in (HandBack("198.18.90.100", "fe80::11", "e0"),  # families differ
                HandBack("198.18.90.100", "198.18.90.11", 'e0" accept; #'),
                HandBack("198.18.90.100", "1.2.3.4; flush ruleset", "e0"),
                HandBack("198.18.90.100", "198.18.90.100", "e0")):
        assert "chain" not in ruleset([bad])


def test_a_host_offers_an_address_of_the_vip_s_family_that_is_no_vip() -> None:
    listing = json.dumps([{"addr_info": [
        {"local": "fe80::100"}, {"local": "2001:db8::5"}, {"local": "fe80::11"},
        {"local": "198.18.90.100"}, {"local": "198.18.90.11"}]}])
    assert own_address(listing, "fe80::100", ["fe80::100"]) == "fe80::11"
    assert own_address(listing, "fe80::200", ["fe80::100"]) == "fe80::11"
    assert own_address(listing, "198.18.90.100", ["198.18.90.100"]) == "198.18.90.11"
    assert own_address(listing, "198.18.90.100", ["198.18.90.100", "198.18.90.11"]) is None
    assert own_address("", "fe80::100", []) is None


def test_where_strays_go_crosses_the_wire() -> None:
    beat = Heartbeat("b", healthy=True, sent=1.0, holds=("fe80::100",),
                     via={"fe80::100": "fe80::11"})
    assert decode(encode(beat, KEY), KEY, now=1.0) == beat


def _speaker() -> L2Speaker:
    return L2Speaker(L2Settings(node="a", interface="e0", listen=("198.18.0.1", 7000),
                                peers={"b": ("198.18.0.2", 7000)}, vips=("fe80::100",),
                                key=KEY))


async def test_a_vip_taken_from_a_live_holder_hands_its_strays_back_until_it_lets_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-back is in force before the announcement moves any client's cache, names the
    peer's address from its heartbeat, and goes once the peer no longer holds the VIP."""
    events: list[str] = []
    applied: list[str] = []

    async def run(*argv: str, stdin: str | None = None) -> tuple[int, str]:
        if argv[0] == "nft":
            applied.append(stdin or "")
            events.append("nft")
            return 0, ""
        return 0, json.dumps([{"addr_info": [{"local": "fe80::12"}]}])

    async def ip(*args: str, may_fail: bool = False) -> None:
        events.append("ip " + " ".join(args[:2]))

    async def usable(vip: str, interface: str) -> None:
        return None

    monkeypatch.setattr(l2_chance, "_run", run)
    monkeypatch.setattr(l2, "_ip", ip)
    monkeypatch.setattr(l2_addr, "usable", usable)
    monkeypatch.setattr(l2, "_send_announcement", lambda *a: events.append("announce"))
    monkeypatch.setattr(l2, "_mac", lambda interface: b"\x02" * 6)
    speaker = _speaker()
    monkeypatch.setattr(speaker, "_send", lambda: None)
    speaker.members.hear(Heartbeat("b", healthy=True, sent=1.0, holds=("fe80::100",),
                                   via={"fe80::100": "fe80::11"}), at=l2.time.monotonic())
    await speaker._reconcile({"fe80::100"})
    assert events[:3] == ["ip addr add", "nft", "announce"]
    assert 'dup to fe80::11 device "e0" drop' in applied[-1]
    assert speaker.via == {"fe80::100": "fe80::12"}  # our own, for the next hand-over
    now = l2.time.monotonic()
    await speaker.chance.prune({"b": {"fe80::100"}}, speaker.held, now=now, limit_s=5)
    assert "fe80::100" in speaker.chance.backs  # b still holds it
    await speaker.chance.prune({"b": set()}, speaker.held, now=now, limit_s=5)
    assert speaker.chance.backs == {}
    assert "chain" not in applied[-1]  # the table is gone


async def test_no_hand_back_from_a_dead_or_silent_peer_and_none_for_long(
        monkeypatch: pytest.MonkeyPatch) -> None:
    applied: list[str] = []

    async def run(*argv: str, stdin: str | None = None) -> tuple[int, str]:
        applied.append(stdin or "")
        return 0, ""

    monkeypatch.setattr(l2_chance, "_run", run)
    chance = L2Chance()
    await chance.take(HandBack("fe80::100", "fe80::11", "e0", "b"), 100.0)
    await chance.prune({}, {"fe80::100"}, now=100.1, limit_s=5)  # b is dead: nothing to reach
    assert chance.backs == {}
    await chance.take(HandBack("fe80::100", "fe80::11", "e0", "b"), 100.0)
    await chance.prune({"b": {"fe80::100"}}, {"fe80::100"}, now=105.1, limit_s=5)
    assert chance.backs == {}  # the old owner's drain window is over
    await chance.take(HandBack("fe80::100", "fe80::11", "e0", "b"), 100.0)
    await chance.prune({"b": {"fe80::100"}}, set(), now=100.1, limit_s=5)
    assert chance.backs == {}  # we no longer hold it
    assert "chain" not in applied[-1]


async def test_a_missing_nft_is_a_warning_not_a_failed_claim(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async def run(*argv: str, stdin: str | None = None) -> tuple[int, str]:
        return 127, "nft is not installed"

    monkeypatch.setattr(l2_chance, "_run", run)
    chance = L2Chance()
    await chance.clear(quiet=True)
    assert "not in force" not in caplog.text
    await chance.take(HandBack("fe80::100", "fe80::11", "e0", "b"), 1.0)
    assert chance.failed
    assert "second chance not in force (nft: nft is not installed)" in caplog.text
