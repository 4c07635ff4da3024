"""Second chance on a real kernel (a throwaway network namespace): install creates the tunnel,
rules and ruleset; remove leaves the namespace exactly as it found it (rules, links, nftables,
ip_forward), also when run by a fresh process after a crash, and twice."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from podway.vip.secondchance import SecondChance, SecondChanceHost
from tests.vip.bed import sh, unavailable

pytestmark = pytest.mark.netns
SC = SecondChance(vips=("198.18.60.1",), ports=(8080,), local="198.18.51.2",
                  peer="198.18.52.2")


@pytest.fixture
def ns() -> Iterator[str]:
    why = unavailable("vrrp")
    if why is not None:
        pytest.skip(why)
    name = f"pwvip{uuid.uuid4().hex[:6]}-sc"
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "link", "set", "lo", "up", ns=name)
        sh("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1", ns=name)
        sh("ip", "addr", "add", "198.18.51.2/24", "dev", "eth0", ns=name)
        sh("ip", "link", "set", "eth0", "up", ns=name)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def state(ns: str) -> tuple[str, str, str, str]:
    return (sh("ip", "rule", ns=ns), sh("ip", "-o", "link", ns=ns),
            sh("nft", "list", "ruleset", ns=ns), sh("sysctl", "-n", "net.ipv4.ip_forward", ns=ns))


async def test_install_then_remove_restores_the_namespace(ns: str) -> None:
    before = state(ns)
    host = SecondChanceHost(SC, prefix=("ip", "netns", "exec", ns))
    await host.install()
    rules = sh("ip", "rule", ns=ns)
    assert "90:\tfrom all fwmark 0x5c0 lookup 5150" in rules
    assert "100:\tfrom all lookup local" in rules
    assert not rules.startswith("0:\t")  # moved, not copied
    assert "\n0:\t" not in rules
    assert "vxlan id 5150" in sh("ip", "-d", "link", "show", "pw-sc", ns=ns)
    assert "default via 198.18.52.2 dev pw-sc onlink" in sh(
        "ip", "route", "show", "table", "5150", ns=ns)
    assert sh("sysctl", "-n", "net.ipv4.ip_forward", ns=ns).strip() == "1"
    assert await host.forwarded() == 0
    await host.disarm()
    assert sh("ip", "route", "show", "table", "5150", ns=ns).strip() == ""
    await host.remove()
    assert state(ns) == before
    await host.remove()  # twice: nothing left to remove, no error
    assert state(ns) == before


async def test_a_fresh_process_removes_what_a_crashed_one_installed(ns: str) -> None:
    before = state(ns)
    await SecondChanceHost(SC, prefix=("ip", "netns", "exec", ns)).install()
    await SecondChanceHost(SC, prefix=("ip", "netns", "exec", ns)).remove()
    after = state(ns)
    # everything but ip_forward, whose earlier value only the installing process knew
    assert after[:3] == before[:3]
