"""Second chance: the exact nftables rules and commands that hand unknown mid-flow packets of a
VIP to the peer (and never a SYN, never a packet back into the tunnel), removal that restores
the local table's rule before dropping the moved one, one-line errors, and the peer follower
that disarms a silent peer and re-arms a live one."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from podway.base.errors import ConfigError
from podway.programs.vip.secondchance import (
    SecondChance,
    arm_steps,
    disarm_steps,
    follow_peer,
    link_steps,
    peer_of,
    remove_steps,
    ruleset,
    tunnel_mac,
)

SC = SecondChance(vips=("198.18.60.1", "198.18.61.0/28"), ports=(443, 80), local="198.18.51.2",
                  peer="198.18.52.2")


def test_ruleset_marks_unknown_mid_flow_packets_of_the_vips_only(tmp_path: Path) -> None:
    """Not a first SYN, unknown to conntrack, to a VIP port: marked; from the tunnel: left
    alone; the VIPs' SYN-ACKs announce an MSS that fits VXLAN. ``nft -c`` accepts it."""
    text = ruleset(SC)
    assert "elements = { 198.18.60.1/32, 198.18.61.0/28 }" in text
    assert 'iifname "pw-sc" return' in text
    assert ("ip daddr @vips tcp dport { 80, 443 } tcp flags & (syn | ack) != syn "
            "ct state new,invalid meta mark set 0x5c0 counter") in text
    assert text.index('iifname "pw-sc" return') < text.index("meta mark set")
    assert ("ip saddr @vips tcp sport { 80, 443 } tcp flags & (syn | ack) == syn | ack "
            "tcp option maxseg size > 1410 tcp option maxseg size set 1410") in text
    assert text.startswith("table inet podway_second_chance {}\n"
                           "delete table inet podway_second_chance\n")  # one transaction
    assert "maxseg" not in ruleset(dataclasses.replace(SC, mss=0))
    assert "tcp dport" not in ruleset(dataclasses.replace(SC, ports=()))  # every port
    # The tunnel takes the peer's packets only, before conntrack (issue 23.11).
    assert ("type filter hook prerouting priority raw; policy accept;\n"
            "        udp dport 4789 fib daddr type local ip saddr != 198.18.52.2 counter drop"
            ) in text
    if os.geteuid() == 0 and shutil.which("nft"):
        conf = tmp_path / "sc.nft"
        conf.write_text(text)
        done = subprocess.run(["nft", "-c", "-f", str(conf)], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr


def test_routing_sends_marked_packets_into_the_tunnel_and_its_own_outer_packets_not() -> None:
    """The tunnel's outer packets (sent here, iif lo) keep the main table; other marked
    packets take the table whose route is the tunnel; the local table moves after both."""
    argv = [" ".join(step.argv) for step in link_steps(SC)]
    assert ("ip link add pw-sc type vxlan id 5150 local 198.18.51.2 remote 198.18.52.2 "
            "dstport 4789 nolearning") in argv
    assert "ip link set pw-sc address 02:5c:c6:12:33:02 up" in argv
    assert "ip addr replace 198.18.51.2/32 dev pw-sc noprefixroute" in argv
    outer = argv.index("ip rule add pref 89 fwmark 0x5c0 iif lo lookup main")
    marked = argv.index("ip rule add pref 90 fwmark 0x5c0 lookup 5150")
    moved = argv.index("ip rule add pref 100 lookup local")
    assert outer < marked < moved < argv.index("ip rule del pref 0 lookup local")
    assert [" ".join(s.argv) for s in arm_steps(SC)] == [
        "ip neigh replace 198.18.52.2 lladdr 02:5c:c6:12:34:02 dev pw-sc nud permanent",
        "ip route replace default via 198.18.52.2 dev pw-sc onlink table 5150"]
    assert [" ".join(s.argv) for s in disarm_steps(SC)] == ["ip route flush table 5150"]


def test_removal_undoes_everything_and_never_leaves_the_host_without_its_local_table() -> None:
    """Every removal step tolerates a missing object (safe after a crash, safe twice); the
    local table's rule returns to 0 before the moved copy goes."""
    steps = remove_steps(SC)
    argv = [" ".join(step.argv) for step in steps]
    assert all(step.may_fail for step in steps)
    assert "nft delete table inet podway_second_chance" in argv
    assert "ip route flush table 5150" in argv
    # exactly our rules: another rule at the same preference stays
    assert "ip rule del pref 90 fwmark 0x5c0 lookup 5150" in argv
    assert "ip rule del pref 89 fwmark 0x5c0 iif lo lookup main" in argv
    assert argv.index("ip rule add pref 0 lookup local") < argv.index(
        "ip rule del pref 100 lookup local")
    assert argv[-1] == "ip link del pw-sc"


def test_tunnel_mac_is_locally_administered_unicast_and_per_host() -> None:
    mac = tunnel_mac("198.18.51.2")
    assert int(mac.split(":")[0], 16) & 0b11 == 0b10
    assert mac != tunnel_mac("198.18.52.2")


@pytest.mark.parametrize(("change", "message"), [
    ({"peer": "198.18.51.2"}, "another host"),
    ({"peer": "2001:db8::1"}, "must be an IPv4 address"),
    ({"local": "nope"}, "local address 'nope'"),
    ({"vips": ()}, "at least one VIP"),
    ({"vips": ("2001:db8::7",)}, "IPv6 is not supported"),
    ({"vips": ("198.18.60.1/24",)}, "must be an IPv4 address or CIDR"),
    ({"ports": (0,)}, "port 0"),
    ({"device": "a name too long!"}, "not a device name"),
    ({"vni": 0}, "VNI"),
    ({"rule_pref": 100}, "rule preference"),
    ({"table": 254}, "table"),
    ({"mss": 100}, "MSS 100"),
])
def test_bad_settings_are_one_line(change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        ruleset(dataclasses.replace(SC, **change))  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


class FakeHost:
    def __init__(self) -> None:
        self.settings = SC
        self.armed = True
        self.calls: list[str] = []

    async def arm(self) -> None:
        self.armed = True
        self.calls.append("arm")

    async def disarm(self) -> None:
        self.armed = False
        self.calls.append("disarm")


async def test_peer_follower_disarms_after_fall_and_rearms_after_rise() -> None:
    """Three silent checks in a row disarm (a dead peer's flows get a reset, not a black hole),
    two live ones arm again; shorter streaks change nothing."""
    answers = iter([False, False, True, False, False, False, True, False, True, True, False])
    host = FakeHost()
    done = asyncio.Event()

    async def alive() -> bool:
        try:
            return next(answers)
        except StopIteration:
            done.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable") from None

    task = asyncio.create_task(follow_peer(host, alive, interval=0))  # type: ignore[arg-type]
    await done.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert host.calls == ["disarm", "arm"]


def test_command_with_bad_flags_is_one_line() -> None:
    """`podway vip second-chance` refuses bad settings before touching anything: a one-line
    ConfigError (``podway.cli.app.main`` prints it and exits with status 2)."""
    from typer.testing import CliRunner

    from podway.cli.app import app
    from podway.cli.commands import register

    register(app)
    result = CliRunner().invoke(app, ["vip", "second-chance", "--local", "198.18.51.2",
                                      "--peer", "198.18.52.2", "--vip", "2001:db8::7"])
    assert isinstance(result.exception, ConfigError)
    assert "IPv6 is not supported" in str(result.exception)


@pytest.mark.parametrize(("local", "peer", "pair", "expected"), [
    ("198.18.51.2", "198.18.52.2", [], "198.18.52.2"),
    ("198.18.51.2", "", ["198.18.51.2", "198.18.52.2"], "198.18.52.2"),
    ("198.18.52.2", "", ["198.18.51.2", "198.18.52.2"], "198.18.51.2"),
])
def test_the_peer_comes_from_peer_or_from_the_pair(local: str, peer: str, pair: list[str],
                                                   expected: str) -> None:
    """--pair lets both hosts share one setting: each takes the address that is not its own."""
    assert peer_of(local, peer, pair) == expected


@pytest.mark.parametrize(("local", "peer", "pair", "says"), [
    ("198.18.51.2", "", [], "the peer is missing"),
    ("198.18.51.2", "198.18.52.2", ["198.18.51.2", "198.18.52.2"], "not both"),
    ("198.18.51.2", "", ["198.18.51.2"], "names two different hosts"),
    ("198.18.51.2", "", ["198.18.51.2", "198.18.51.2"], "names two different hosts"),
    ("198.18.53.2", "", ["198.18.51.2", "198.18.52.2"], "is not one of the pair"),
])
def test_a_pair_that_cannot_work_is_one_line(local: str, peer: str, pair: list[str],
                                             says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        peer_of(local, peer, pair)
