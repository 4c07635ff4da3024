"""L2 mode for IPv6 in network namespaces: NDP, with a real client's neighbour cache::

    client  ─┐
    eng1     ├─ bridge (namespace "lan")      VIP fe80::100 (link-local, on e0), one owner
    eng2    ─┘

The bed of test_l2.py with a link-local IPv6 VIP: the only IPv6 used is link-local, on the
test's own veths. The heartbeats go over IPv4 (198.18.90.0/24) or, in the IPv6-only variant
(no IPv4 address at all), between link-local addresses (``--listen [fe80::11%e0]:7946``).
Each engine runs ``podway echo`` on ``::``.
The owner puts the VIP on e0 (the kernel then answers Neighbor Solicitations for it); the client
connects to ``[fe80::100%e0]:8080`` and its neighbour cache learns the owner's MAC. The owner
dies (link cut, processes killed): the other host takes the VIP and sends an unsolicited Neighbor
Advertisement with the override flag, and the client's cache moves to its MAC.

The client's neighbour entries are kept REACHABLE for at least 60 s (``base_reachable_time_ms``),
so without that advertisement the cache would keep the dead host's MAC for longer than the test
waits: the move proves the advertisement, not the kernel's own probing. Namespace names are
random and marked ``pwl2``; everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.vip.test_l2 import ENGINES, PODWAY, L2Bed, sh, unavailable
from tests.waiting import eventually

pytestmark = pytest.mark.netns

VIP6 = "fe80::100"
URL = f"http://[{VIP6}%25e0]:8080/"  # the zone (the client's e0) is part of the address
REACHABLE_MS = 120_000  # the kernel keeps an entry REACHABLE 0.5-1.5 times this long
LINK_LOCAL = {"eng1": "fe80::11", "eng2": "fe80::12"}  # the IPv6-only variant's heartbeats


class NdpBed(L2Bed):
    """L2Bed with echo on ``::`` and the speakers given the link-local VIP; ``ipv6_only``:
    no IPv4 address, the heartbeats between link-local addresses."""

    def __init__(self, folder: Path, *, ipv6_only: bool) -> None:
        super().__init__(folder)
        self.ipv6_only = ipv6_only

    def open(self) -> None:
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
        lan = self.ns["lan"]
        sh("ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", ns=lan)
        sh("ip", "link", "set", "br0", "up", ns=lan)
        for name, address in (("client", "198.18.90.2"), *ENGINES.items()):
            ns = self.ns[name]
            sh("ip", "link", "add", f"p-{name}", "type", "veth", "peer", "name", "e0",
               "netns", ns, ns=lan)
            sh("ip", "link", "set", f"p-{name}", "master", "br0", "up", ns=lan)
            sh("sysctl", "-qw", "net.ipv6.conf.e0.accept_dad=0", ns=ns)
            if not self.ipv6_only:
                sh("ip", "addr", "add", f"{address}/24", "dev", "e0", ns=ns)
            elif name in LINK_LOCAL:
                sh("ip", "-6", "addr", "add", f"{LINK_LOCAL[name]}/64", "dev", "e0", ns=ns)
            sh("ip", "link", "set", "e0", "up", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("sysctl", "-qw", f"net.ipv6.neigh.e0.base_reachable_time_ms={REACHABLE_MS}",
           ns=self.ns["client"])
        for name in ENGINES:
            self.spawn(name, [*PODWAY, "echo", "--address", "::", "--port", "8080",
                              "--name", name])
            self.start_speaker(name)

    def start_speaker(self, name: str) -> None:
        other = next(n for n in ENGINES if n != name)
        if self.ipv6_only:
            listen, peer = f"[{LINK_LOCAL[name]}%e0]:7946", f"[{LINK_LOCAL[other]}%e0]:7946"
        else:
            listen, peer = f"{ENGINES[name]}:7946", f"{ENGINES[other]}:7946"
        self.spawn(name, [*PODWAY, "vip", "l2", "--node", name, "--interface", "e0",
                          "--listen", listen, "--peer", f"{other}={peer}", "--vip", VIP6,
                          "--key-file", str(self.key), "--hand-over-wait", "1"])

    def holders(self, among: tuple[str, ...] = tuple(ENGINES)) -> list[str]:
        return [n for n in among
                if f"{VIP6}/128" in sh("ip", "-6", "addr", "show", "dev", "e0", ns=self.ns[n])]

    def mac(self, name: str) -> str:
        return sh("cat", "/sys/class/net/e0/address", ns=self.ns[name]).strip()

    def cached(self) -> str | None:
        """The MAC the client's neighbour cache has for the VIP on e0 (None: no entry)."""
        words = sh("ip", "-6", "neigh", "show", VIP6, "dev", "e0", ns=self.ns["client"]).split()
        return words[words.index("lladdr") + 1] if "lladdr" in words else None

    def ask(self) -> str:
        out = sh("curl", "-s", "-g", "-m", "1", URL, ns=self.ns["client"], check=False)
        try:
            return str(json.loads(out)["name"])
        except (ValueError, KeyError):
            return ""


@pytest.fixture(params=[False, True], ids=["ipv4-heartbeats", "ipv6-only"])
def bed(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[NdpBed]:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    made = NdpBed(tmp_path, ipv6_only=request.param)
    try:
        made.open()
        yield made
    finally:
        made.close()


async def test_the_client_s_neighbour_cache_follows_a_link_local_vip_to_its_new_owner(
        bed: NdpBed) -> None:
    """The elected engine alone holds fe80::100 and answers; the client's cache has its MAC
    (learnt by Neighbor Solicitation, answered by the owner's kernel). When the owner's host
    dies, the other takes the VIP, its unsolicited NA (override) moves the client's cache to
    its MAC, and the client is answered by it again."""
    await eventually(lambda: bed.owner() is not None, within=15)
    first = bed.owner()
    assert first is not None
    other = next(n for n in ENGINES if n != first)
    await eventually(lambda: bed.ask() == first, within=10)
    assert bed.cached() == bed.mac(first)
    cut = time.monotonic()
    sh("ip", "link", "set", "e0", "down", ns=bed.ns[first])
    for proc in bed.procs[first]:
        os.killpg(proc.pid, signal.SIGKILL)
    await eventually(lambda: bed.cached() == bed.mac(other), within=15)
    moved = time.monotonic() - cut
    await eventually(lambda: bed.ask() == other, within=15)
    print(f"\nL2 NDP failover: the client's cache had {other}'s MAC {moved:.2f} s and "
          f"{other} answered {time.monotonic() - cut:.2f} s after {first} died "
          "(target ≤ 2 s; machine loaded by other engineers)")
    assert bed.holders((other,)) == [other]
    assert bed.holders() == [other]

