"""L2 mode: one engine host per VIP answers ARP (IPv4) and NDP (IPv6) for it, as MetalLB's L2 mode.

Every host of a group runs ``podway vip l2`` with the same VIPs and the list of its peers. The
hosts tell each other every ``interval`` that they are alive and whether their engine is healthy
(UDP heartbeats, authenticated with an HMAC of a key they share: a forged heartbeat could steal a
VIP). Each VIP's owner is chosen by rendezvous hashing over the hosts alive and healthy now, so
every host computes the same owner without a vote, the VIPs spread over the hosts, and when a
host goes only its VIPs move. The owner puts the VIP on its interface (the kernel then answers
ARP/NDP for it) and announces it: gratuitous ARP (request and reply forms) or an unsolicited
Neighbor Advertisement with the override flag, so the clients' neighbour caches move at once.

A host is taken for dead after ``dead_after`` intervals without a heartbeat (default 3 of 0.2 s),
so a VIP moves well within 2 s of its owner failing. A starting host listens that long before
it claims anything (it would otherwise take every VIP for a moment, alone as far as it knows).
Heartbeats say which VIPs their sender holds: on a graceful stop the host says it is leaving
and keeps each VIP until a peer reports holding it (the new owner has announced it), so some
host answers for the VIP at every moment. They also say which VIPs the sender is taking (its
address is not usable yet: an IPv6 one waits for the kernel's address work, over a second on a
busy host): a VIP a live peer is taking is kept up to ``CLAIM_FACTOR`` times longer.

Pure parts (heartbeat encoding, the election, the announcement packets) are functions; the
speaker does the I/O (a UDP socket, ``ip addr``, a packet socket, a raw ICMPv6 socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from podway.base.children import run_command
from podway.base.errors import ConfigError, EnvironmentProblem
from podway.programs.vip import l2_addr, l2_chance
from podway.programs.vip.l2_arp import ArpIsolation

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_AGE_S = 5.0  # a heartbeat older than this (clock of its sender) is refused: no replay
CLAIM_FACTOR = 5  # a VIP a live peer is taking is kept this many times hand_over_s at most


# --- heartbeats ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Heartbeat:
    node: str
    healthy: bool
    leaving: bool = False
    sent: float = 0.0  # the sender's wall clock
    holds: tuple[str, ...] = ()  # the VIPs the sender has on its interface
    serves: tuple[str, ...] | None = None  # the VIPs it may own (its node is selected); None: all
    claims: tuple[str, ...] = ()  # the VIPs it is taking (added, not usable yet)
    via: Mapping[str, str] = field(default_factory=dict)  # held VIP → where strays go (l2_chance)


def encode(beat: Heartbeat, key: bytes) -> bytes:
    raw = {"node": beat.node, "healthy": beat.healthy, "leaving": beat.leaving,
           "sent": beat.sent, "holds": list(beat.holds)}
    if beat.serves is not None:
        raw["serves"] = list(beat.serves)
    if beat.claims:
        raw["claims"] = list(beat.claims)
    if beat.via:
        raw["via"] = dict(beat.via)
    body = json.dumps(raw, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).digest() + body


def decode(data: bytes, key: bytes, *, now: float) -> Heartbeat | None:
    """The heartbeat in ``data`` when its HMAC holds and it is recent; else None."""
    mac, body = data[:32], data[32:]
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        return None
    try:
        raw = json.loads(body)
        serves = raw.get("serves")
        beat = Heartbeat(node=str(raw["node"]), healthy=bool(raw["healthy"]),
                         leaving=bool(raw["leaving"]), sent=float(raw["sent"]),
                         holds=tuple(str(v) for v in raw.get("holds", ())),
                         serves=None if serves is None else tuple(str(v) for v in serves),
                         claims=tuple(str(v) for v in raw.get("claims", ())),
                         via={str(k): str(v) for k, v in raw.get("via", {}).items()})
    except (ValueError, KeyError, TypeError):
        return None
    return beat if abs(now - beat.sent) <= MAX_AGE_S else None


# --- election -----------------------------------------------------------------------------------
def owner(vip: str, candidates: Iterable[str]) -> str | None:
    """The owner of ``vip`` among ``candidates`` (rendezvous hashing: the highest hash of the
    pair wins), None when there is none."""
    return max(candidates, key=lambda node: hashlib.sha256(f"{vip}/{node}".encode()).digest(),
               default=None)


@dataclass(slots=True)
class Membership:
    """Who was heard from, when, and in which state."""

    dead_after_s: float
    heard: dict[str, tuple[float, Heartbeat]] = field(default_factory=dict)

    def hear(self, beat: Heartbeat, at: float) -> bool:
        """Take ``beat`` unless it is not newer than the last one of its sender (a replayed
        heartbeat would keep a dead host alive until it is ``MAX_AGE_S`` old)."""
        last = self.heard.get(beat.node)
        if last is not None and beat.sent <= last[1].sent:
            return False
        self.heard[beat.node] = (at, beat)
        return True

    def candidates(self, now: float, vip: str | None = None) -> set[str]:
        """Peers alive (heard within ``dead_after_s``), healthy and not leaving (and, given a
        ``vip``, that may own it: their node is selected for it)."""
        return {node for node, (at, beat) in self.heard.items()
                if now - at <= self.dead_after_s and beat.healthy and not beat.leaving
                and (vip is None or beat.serves is None or vip in beat.serves)}

    def held_by_others(self, now: float) -> set[str]:
        """The VIPs live peers say they hold."""
        return {vip for at, beat in self.heard.values() if now - at <= self.dead_after_s
                for vip in beat.holds}

    def claimed_by_others(self, now: float) -> set[str]:
        """The VIPs live peers say they are taking."""
        return {vip for at, beat in self.heard.values() if now - at <= self.dead_after_s
                for vip in beat.claims}


# --- announcements ------------------------------------------------------------------------------
def garp_frames(mac: bytes, vip: ipaddress.IPv4Address) -> list[bytes]:
    """Gratuitous ARP for ``vip`` at ``mac``: a request and a reply, broadcast (some hosts only
    update their cache from one of the two)."""
    frames = []
    for op, target_mac in ((1, b"\x00" * 6), (2, b"\xff" * 6)):
        ether = b"\xff" * 6 + mac + b"\x08\x06"
        arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, mac, vip.packed, target_mac,
                          vip.packed)
        frames.append(ether + arp)
    return frames


def unsolicited_na(mac: bytes, vip: ipaddress.IPv6Address) -> bytes:
    """An unsolicited Neighbor Advertisement (ICMPv6 136) for ``vip`` at ``mac`` with the
    override flag, to be sent to ff02::1 with hop limit 255 (the kernel adds the checksum)."""
    flags = 0x20000000  # O: override the cached link-layer address
    return (struct.pack("!BBHI", 136, 0, 0, flags) + vip.packed
            + struct.pack("!BB6s", 2, 1, mac))  # option: target link-layer address


# --- the speaker --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class L2Settings:
    node: str
    interface: str
    listen: tuple[str, int]
    peers: Mapping[str, tuple[str, int]]  # node name → its heartbeat address
    vips: tuple[str, ...]
    key: bytes
    interval_s: float = 0.2
    dead_after: int = 3  # missed heartbeats before a peer is taken for dead
    hand_over_s: float = 1.0  # on stop: how long the peers get to take the VIPs over
    # VIP → the interfaces this host puts it on when it owns it (MetalLB's L2Advertisement
    # ``nodeSelectors`` and ``interfaces``); a VIP missing: this host may not own it; () its
    # ``interface``. None: every VIP, on ``interface``.
    placement: Mapping[str, tuple[str, ...]] | None = None
    # Own nothing while this host hears fewer than half of its peers (it is on the minority
    # side of a split); False: MetalLB's way, every side of a split takes every VIP.
    quorum: bool = False
    # arp_ignore=1/arp_announce=2 on the interfaces this host may put VIPs on, put back on exit
    # (podway.programs.vip.l2_arp); False: leave the host's sysctls alone.
    arp_isolation: bool = True


def read_key(path: Path) -> bytes:
    """The shared key (at least 16 bytes); a missing or short file is one line."""
    try:
        key = path.read_bytes().strip()
    except OSError as err:
        raise ConfigError(f"--key-file {path}: {err.strerror or err}") from None
    if len(key) < 16:
        raise ConfigError(f"--key-file {path}: the key must be at least 16 bytes")
    return key


class L2Speaker:
    """Holds the VIPs this host owns; see the module docstring."""

    def __init__(self, settings: L2Settings,
                 healthy: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.s = settings
        self.healthy = healthy
        self.members = Membership(dead_after_s=settings.interval_s * settings.dead_after)
        self.held: set[str] = set()
        self.on: dict[str, tuple[str, ...]] = {}  # held VIP → the interfaces it is on
        self.placement = settings.placement  # replaced live (podway.programs.vip.metallb_l2)
        # Replaced live in a cluster (podway.programs.vip.l2_cluster): the group's Nodes and
        # the addresses its Services hold.
        self.peers: Mapping[str, tuple[str, int]] = settings.peers
        self.vips: tuple[str, ...] = settings.vips
        self.engine_ok = healthy is None
        self.arp = ArpIsolation() if settings.arp_isolation else None
        self._losing: dict[str, float] = {}  # held VIP the election gives away → since when
        self.claiming: set[str] = set()  # VIPs being added, not usable yet
        self.leaving = False
        self.chance = l2_chance.L2Chance()  # strays of a VIP taken from a live peer go back
        self.via: dict[str, str] = {}  # held VIP → this host's address for a peer's strays
        self._sock: socket.socket | None = None

    def wanted(self, now: float) -> set[str]:
        """The VIPs this host should hold now: for each, the owner among the hosts alive,
        healthy and allowed to own it."""
        me = self.engine_ok and not self.leaving
        if self.s.quorum and not self.in_majority(now):
            return set()
        out = set()
        for vip in self.vips:
            candidates = self.members.candidates(now, vip)
            if me and self.serves(vip):
                candidates.add(self.s.node)
            if owner(vip, candidates) == self.s.node:
                out.add(vip)
        return out

    def keeping(self, wanted: set[str], now: float) -> set[str]:
        """``wanted`` and each VIP this host holds but is losing (its engine is no longer
        ready, or the hash gives it to a newcomer) until a live peer says it holds it — the new
        owner has announced it — or for ``hand_over_s`` at most (``CLAIM_FACTOR`` times that
        while a live peer says it is taking it): some host answers at every moment, as on a
        graceful stop. A VIP no live peer may take, or no longer a VIP, goes at once (a split's
        minority side hears no peer: it lets go at once)."""
        self._losing = {v: self._losing.get(v, now) for v in self.held - wanted}
        taken, claimed = self.members.held_by_others(now), self.members.claimed_by_others(now)
        return wanted | {v for v, since in self._losing.items()
                         if v in self.vips and v not in taken and self.members.candidates(now, v)
                         and now - since < self.s.hand_over_s * (CLAIM_FACTOR if v in claimed
                                                                 else 1)}

    def in_majority(self, now: float) -> bool:
        """This host and the peers it hears (alive, whatever their health) are more than half
        of the group."""
        heard = sum(1 for node, (at, _) in self.members.heard.items()
                    if node in self.peers and now - at <= self.members.dead_after_s)
        return (heard + 1) * 2 > len(self.peers) + 1

    def serves(self, vip: str) -> bool:
        return self.placement is None or vip in self.placement

    def interfaces(self, vip: str) -> tuple[str, ...]:
        """Where ``vip`` goes when this host owns it."""
        found = self.placement.get(vip) if self.placement is not None else None
        return found or (self.s.interface,)

    async def run(self) -> None:
        """Heartbeats out and in, and the VIPs held as the election says, until cancelled;
        then hand over and let go (also on cancellation)."""
        loop = asyncio.get_running_loop()
        self._sock = socket.socket(socket.AF_INET6 if ":" in self.s.listen[0] else
                                   socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        try:
            self._sock.bind(sockaddr(self.s.listen))
        except OSError as err:
            raise EnvironmentProblem(f"l2: cannot listen on {self.s.listen}: {err}") from None
        loop.add_reader(self._sock.fileno(), self._receive)
        await self.chance.clear(quiet=True)  # a crashed run's
        beats = asyncio.create_task(self._beats(), name="l2-heartbeats")
        try:
            await self._loop()
        finally:
            beats.cancel()
            with contextlib.suppress(Exception):
                await asyncio.shield(self._hand_over())
            with contextlib.suppress(Exception):
                await asyncio.shield(self.chance.clear())
            loop.remove_reader(self._sock.fileno())
            self._sock.close()
            if self.arp is not None:
                self.arp.restore()

    def isolate(self) -> None:
        """Every interface this host may put a VIP on answers ARP only for its own addresses
        (set before claiming, on owners and the others alike: see l2_arp)."""
        if self.arp is None:
            return
        wanted = {self.s.interface}
        for interfaces in (self.placement or {}).values():
            wanted.update(interfaces)
        for interface in sorted(wanted):
            self.arp.ensure(interface)

    async def _beats(self) -> None:
        """A heartbeat every interval, also while a VIP is being added (which may take long)."""
        while True:
            self._send()
            await asyncio.sleep(self.s.interval_s)

    async def _loop(self) -> None:
        warm = time.monotonic() + self.members.dead_after_s  # hear the peers before claiming
        while True:
            if self.healthy is not None:
                self.engine_ok = await self.healthy()
            self.isolate()
            now = time.monotonic()
            if now >= warm:
                await self._reconcile(self.keeping(self.wanted(now), now))
                holds = {n: set(b.holds) for n, (at, b) in self.members.heard.items()
                         if now - at <= self.members.dead_after_s}
                await self.chance.prune(holds, self.held, now=now,
                                        limit_s=self.s.hand_over_s * CLAIM_FACTOR)
            await asyncio.sleep(self.s.interval_s)

    def _receive(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(2048)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            beat = decode(data, self.s.key, now=time.time())
            if beat is not None and beat.node in self.peers:
                self.members.hear(beat, time.monotonic())

    def _send(self) -> None:
        assert self._sock is not None
        serves = None if self.placement is None else tuple(sorted(self.placement))
        data = encode(Heartbeat(self.s.node, self.engine_ok, self.leaving, time.time(),
                                tuple(sorted(self.held)), serves, tuple(sorted(self.claiming)),
                                {v: a for v, a in self.via.items() if v in self.held}),
                      self.s.key)
        for address in self.peers.values():
            with contextlib.suppress(OSError):  # a peer's host may be down: that is the point
                self._sock.sendto(data, sockaddr(address))

    async def _reconcile(self, wanted: set[str]) -> None:
        moved = {v for v in wanted & self.held if self.on.get(v) != self.interfaces(v)}
        for vip in sorted((self.held - wanted) | moved):
            for interface in self.on.pop(vip, ()):
                await _ip("addr", "del", *_address(vip, interface), may_fail=True)
            self.held.discard(vip)
            self.via.pop(vip, None)
            if vip not in moved:
                log.warning("l2: %s let go of %s", self.s.node, vip)
        for vip in sorted(wanted - self.held):
            interfaces = self.interfaces(vip)
            self.claiming.add(vip)
            self._send()  # the old owner keeps it while we take it
            try:
                for interface in interfaces:
                    await _ip("addr", "add", *_address(vip, interface))
                for interface in interfaces:
                    await l2_addr.usable(vip, interface)
                await self._take_strays(vip, interfaces[0])
            finally:
                self.claiming.discard(vip)
            self.held.add(vip)
            self.on[vip] = interfaces
            log.warning("l2: %s now answers for %s on %s", self.s.node, vip,
                        ", ".join(interfaces))
            await self._announce(vip)

    async def _take_strays(self, vip: str, interface: str) -> None:
        """Before announcing ``vip``: a live peer that holds it gets back what it still serves
        (l2_chance); and where our own strays would go, once we hold it."""
        now = time.monotonic()
        for node, (at, beat) in sorted(self.members.heard.items()):
            if now - at <= self.members.dead_after_s and vip in beat.holds and vip in beat.via:
                await self.chance.take(l2_chance.HandBack(vip, beat.via[vip], interface, node),
                                       now)
                break
        via = await l2_chance.address_for(interface, vip, self.vips)
        if via is not None:
            self.via[vip] = via

    async def _announce(self, vip: str, times: int = 3) -> None:
        """Tell each segment where ``vip`` is now, a few times (a lost frame is not fatal)."""
        address = ipaddress.ip_address(vip)
        for i in range(times):
            for interface in self.on.get(vip, (self.s.interface,)):
                try:
                    _send_announcement(interface, _mac(interface), address)
                except (OSError, EnvironmentProblem) as err:
                    log.warning("l2: announcing %s on %s failed: %s", vip, interface, err)
            if i + 1 < times:
                await asyncio.sleep(0.1)

    async def _hand_over(self) -> None:
        """Say we are leaving; let go of each VIP once a peer reports holding it (or after
        ``hand_over_s``, ``CLAIM_FACTOR`` times that while a live peer is taking one, or at once
        when no peer is alive to take it)."""
        self.leaving = True
        start = time.monotonic()
        while self.held and self.members.candidates(now := time.monotonic()):
            claimed = self.held & self.members.claimed_by_others(now)
            if now - start >= self.s.hand_over_s * (CLAIM_FACTOR if claimed else 1):
                break
            self._send()
            await self._reconcile(self.held - self.members.held_by_others(now))
            await asyncio.sleep(self.s.interval_s / 4)
        await self._reconcile(set())


def _address(vip: str, interface: str) -> list[str]:
    if ":" in vip:
        return [f"{vip}/128", "dev", interface, "nodad"]
    return [f"{vip}/32", "dev", interface]


async def _ip(*args: str, may_fail: bool = False) -> None:
    code, _, err = await run_command(
        "ip", *(("-6",) if any(":" in a for a in args[:3]) else ()), *args,
        stdout=asyncio.subprocess.DEVNULL)
    text = err.decode(errors="replace").strip()
    if code != 0 and not may_fail and "File exists" not in text:
        raise EnvironmentProblem(f"ip {' '.join(args)}: {text}")


def _mac(interface: str) -> bytes:
    try:
        text = Path(f"/sys/class/net/{interface}/address").read_text().strip()
    except OSError as err:
        raise EnvironmentProblem(f"l2: no interface {interface!r}: {err.strerror}") from None
    return bytes.fromhex(text.replace(":", ""))


def _send_announcement(interface: str, mac: bytes, address: IPAddress) -> None:
    if isinstance(address, ipaddress.IPv4Address):
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
            raw.bind((interface, 0))
            for frame in garp_frames(mac, address):
                raw.send(frame)
        return
    with socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6) as icmp:
        icmp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
        icmp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF,
                        socket.if_nametoindex(interface))
        icmp.sendto(unsolicited_na(mac, address), ("ff02::1", 0, 0,
                                                    socket.if_nametoindex(interface)))


@functools.lru_cache(maxsize=256)
def sockaddr(address: tuple[str, int]) -> tuple[str, int] | tuple[str, int, int, int]:
    """``address`` as a socket takes it: an IPv6 one as a 4-tuple with its scope, since a
    2-tuple's ``%zone`` is dropped (a link-local ``fe80::1%eth0`` would bind or send nowhere)."""
    host, port = address
    if ":" not in host:
        return address
    try:
        found = socket.getaddrinfo(host, port, socket.AF_INET6, socket.SOCK_DGRAM, 0,
                                   socket.AI_NUMERICHOST)
    except socket.gaierror:  # an unknown zone: the bind or send says so
        return address
    return found[0][4][:4]  # type: ignore[return-value]


def parse_peer(text: str) -> tuple[str, tuple[str, int]]:
    """``NAME=ADDRESS:PORT`` (``[v6]:PORT``); ConfigError naming the flag otherwise."""
    name, _, rest = text.partition("=")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        number = int(port)
        if not 1 <= number <= 65535 or not name:
            raise ValueError
    except ValueError:
        raise ConfigError(f"--peer {text!r}: expected NAME=ADDRESS:PORT") from None
    return name, (host, number)


def check_vips(vips: Sequence[str]) -> tuple[str, ...]:
    out = []
    for vip in vips:
        try:
            address = ipaddress.ip_address(vip)
        except ValueError:
            raise ConfigError(f"--vip {vip!r} is not an IP address") from None
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
            # A link-local VIP is bound to the interfaces it is put on; ``ip`` takes no zone.
            raise ConfigError(f"--vip {vip!r}: give the address without %zone; it goes on "
                              "--interface (or the L2Advertisement's interfaces)")
        out.append(str(address))
    if not out:
        raise ConfigError("give at least one --vip")
    return tuple(out)
