"""Second chance's tunnel takes packets from the peer only (issue 23.11): the kernel's VXLAN
accepts any source, so a third host that reaches UDP 4789 could inject packets to the VIPs past
the reverse-path filter. Real kernel, throwaway namespaces: a host with second chance and a VIP,
and a neighbour holding both the peer's address and a third host's; each sends one VXLAN packet
carrying a UDP datagram to the VIP, and a socket on the VIP says which arrived."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from podway.programs.vip.secondchance import SecondChance, SecondChanceHost, tunnel_mac
from tests.integration.vip.bed import sh, unavailable

pytestmark = pytest.mark.netns
HOST, PEER, THIRD = "198.18.51.2", "198.18.51.3", "198.18.51.9"
VIP, CLIENT, PORT = "198.18.60.1", "198.18.50.2", 9999
SC = SecondChance(vips=(VIP,), ports=(8080,), local=HOST, peer=PEER)

RECEIVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    data, _ = s.recvfrom(2048)
    print(data.decode(), flush=True)
"""
SENDER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0))
s.sendto(bytes.fromhex(sys.argv[4]), (sys.argv[2], int(sys.argv[3])))
"""


@dataclass
class Bed:
    host: str
    neighbour: str


@pytest.fixture
def bed() -> Iterator[Bed]:
    why = unavailable("vrrp")
    if why is not None:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:6]
    made = Bed(f"pwvip{tag}-h", f"pwvip{tag}-n")
    try:
        for ns in (made.host, made.neighbour):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
           made.neighbour, ns=made.host)
        sh("ip", "addr", "add", f"{HOST}/24", "dev", "eth0", ns=made.host)
        for address in (PEER, THIRD):
            sh("ip", "addr", "add", f"{address}/24", "dev", "eth0", ns=made.neighbour)
        for ns in (made.host, made.neighbour):
            sh("ip", "link", "set", "eth0", "up", ns=ns)
        sh("ip", "addr", "add", f"{VIP}/32", "dev", "lo", ns=made.host)
        # the inner packet's client is reachable (loose reverse-path filter on the tunnel)
        sh("ip", "route", "add", "default", "via", THIRD, ns=made.host)
        yield made
    finally:
        delete_namespaces(made.host, made.neighbour)


def delete_namespaces(*names: str) -> None:
    for ns in names:
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF


def vxlan(payload: bytes) -> bytes:
    """One VXLAN packet (the tunnel's VNI) holding an Ethernet frame to the host's tunnel
    device, holding a UDP datagram from CLIENT to the VIP."""
    udp = struct.pack("!HHHH", 40000, PORT, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, socket.IPPROTO_UDP, 0,
                     ipaddress.IPv4Address(CLIENT).packed, ipaddress.IPv4Address(VIP).packed)
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    mac = bytes.fromhex(tunnel_mac(HOST).replace(":", ""))
    frame = mac + bytes.fromhex("02aabbccddee") + struct.pack("!H", 0x0800) + ip + udp
    return struct.pack("!B3xI", 0x08, SC.vni << 8) + frame


def send(bed: Bed, source: str, payload: str) -> None:
    sh(sys.executable, "-c", SENDER, source, HOST, str(SC.udp_port),
       vxlan(payload.encode()).hex(), ns=bed.neighbour)


async def test_only_the_peer_can_hand_packets_in(bed: Bed) -> None:
    """The third host's packet is dropped (and counted), the peer's is delivered."""
    host = SecondChanceHost(SC, prefix=("ip", "netns", "exec", bed.host))
    await host.install()
    try:
        receiver = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", bed.host, sys.executable, "-c", RECEIVER, VIP, str(PORT),
            stdout=asyncio.subprocess.PIPE)
        try:
            assert receiver.stdout is not None
            async with asyncio.timeout(10):
                assert (await receiver.stdout.readline()).strip() == b"ready"
            send(bed, THIRD, "injected")
            send(bed, PEER, "from-the-peer")
            await asyncio.sleep(1.0)
        finally:
            receiver.terminate()
            async with asyncio.timeout(10):
                out, _ = await receiver.communicate()
        got = [line for line in out.decode().splitlines() if line != "ready"]
        assert got == ["from-the-peer"]
        counters = sh("nft", "list", "chain", "inet", "podway_second_chance", "tunnel",
                      ns=bed.host)
        assert "counter packets 1 " in counters, counters
    finally:
        await host.remove()


TCP_ACK = ("import socket, struct\n"
           "s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)\n"
           "ack = struct.pack('!HHIIBBHHH', 40000, 8080, 1, 1, 5 << 4, 0x10, 1000, 0, 0)\n"
           "for _ in range(3):\n"
           f"    s.sendto(ack, ('{VIP}', 0))\n")


async def test_the_peers_hand_back_passes_the_filter() -> None:
    """What the earlier attempt broke, measured: a mid-flow packet the host does not know goes
    to its peer in VXLAN whose outer source is the host's own address and whose source port is
    *not* 4789 (the kernel picks it from the ephemeral range for ECMP entropy): a filter keyed
    on the source port, or on 4789 both ways, drops every hand-back. Keyed on the peer's
    address and the destination port, the handed-back packets all arrive."""
    why = unavailable("vrrp")
    if why is not None:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:6]
    a, b, c = f"pwvip{tag}-a", f"pwvip{tag}-b", f"pwvip{tag}-c"
    try:
        for ns in (a, b, c):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", b, ns=a)
        sh("ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", c, ns=a)
        for ns, dev, address in ((a, "eth0", f"{HOST}/24"), (b, "eth0", f"{PEER}/24"),
                                 (a, "eth1", "198.18.50.1/24"), (c, "eth0", f"{CLIENT}/24")):
            sh("ip", "addr", "add", address, "dev", dev, ns=ns)
            sh("ip", "link", "set", dev, "up", ns=ns)
        sh("ip", "route", "add", "default", "via", "198.18.50.1", ns=c)
        sh("ip", "addr", "add", f"{VIP}/32", "dev", "lo", ns=a)
        here = SecondChanceHost(SC, prefix=("ip", "netns", "exec", a))
        there = SecondChanceHost(SecondChance(vips=(VIP,), ports=(8080,), local=PEER, peer=HOST),
                                 prefix=("ip", "netns", "exec", b))
        await here.install()
        await there.install()
        try:
            await here.arm()
            sh("nft", "add", "table", "inet", "probe", ns=b)
            sh("nft", "add", "chain", "inet", "probe", "seen",
               "{ type filter hook prerouting priority raw - 10; }", ns=b)
            sh("nft", "add", "rule", "inet", "probe", "seen", "udp", "dport", "4789", "udp",
               "sport", "4789", "counter", ns=b)
            sh("nft", "add", "rule", "inet", "probe", "seen", "udp", "dport", "4789", "ip",
               "saddr", HOST, "counter", ns=b)
            sh(sys.executable, "-c", TCP_ACK, ns=c)  # mid-flow packets of a stranger flow
            seen = sh("nft", "list", "chain", "inet", "probe", "seen", ns=b)
            tunnel = sh("nft", "list", "chain", "inet", "podway_second_chance", "tunnel", ns=b)
        finally:
            await here.remove()
            await there.remove()
        sport_4789, from_host = (line for line in seen.splitlines() if "counter" in line)
        assert "packets 0 " in sport_4789, seen
        # Every hand-back arrives (3 sent; CI once counted a 4th, cause not checked):
        # all of them, not exactly them.
        handed = re.search(r"packets (\d+) ", from_host)
        assert handed is not None, seen
        assert int(handed.group(1)) >= 3, seen
        assert "packets 0 " in tunnel, tunnel  # none of them dropped
    finally:
        delete_namespaces(a, b, c)
