"""Second chance: an engine host hands the packets of TCP flows it does not know to its peer,
so connections still open on a peer that withdrew (BGP) or handed its VIPs over (VRRP) keep
working while that peer drains — GitHub GLB's and Katran's idea, built from kernel parts:

- nftables (``table inet podway_second_chance``) marks a packet for a VIP port that is not a
  connection's first SYN and that conntrack does not know (``ct state new,invalid``): a
  mid-flow packet of a connection this host never accepted;
- only the peer's tunnel packets are taken: UDP ``udp_port`` to this host from anyone else is
  dropped (chain ``tunnel``, before conntrack), as the kernel's VXLAN takes any source;
- policy routing sends marked packets through table ``table`` (rule preference ``rule_pref``,
  before the ``local`` table, which moves from preference 0 to ``local_pref`` — as Cilium
  does) into a point-to-point VXLAN tunnel to the peer (the peer's tunnel MAC is derived from
  its address, so nothing is learnt); VXLAN crosses routed networks (BGP) and shared segments
  (VRRP) alike, and it marks where a packet came from: one that arrived from the tunnel is
  never sent on again (no ping-pong);
- the peer, where the connection lives (the VIP stays local there: on ``lo`` or as an AnyIP
  route), delivers the packet to its socket and answers the client directly.

Arming is the route in ``table``: ``disarm`` removes it, and marked packets fall through to
the local stack, which resets unknown flows at once — what a host does without this. Arm while
the peer is alive; a dead peer's flows are lost either way, and the RST ends them sooner.

Invariants: install before the engine accepts connections (conntrack must have seen every local
connection's SYN, or its packets would be taken for a stranger's); SYNs are always served here;
``remove`` deletes everything install created and restores what it changed, and is safe to run
again or after a crash. IPv4 only (the VIPs and the peer).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from podway.base.children import run_command
from podway.base.errors import ConfigError, EnvironmentProblem

log = logging.getLogger(__name__)

TABLE = "podway_second_chance"
STRAY = "tcp flags & (syn | ack) != syn ct state new,invalid"
"""A mid-flow packet of a connection this host never accepted: not a connection's first SYN,
and unknown to conntrack (also used by L2 mode's hand-over: ``podway.programs.vip.l2_chance``)."""
_DEVICE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class SecondChance:
    vips: tuple[str, ...]
    """VIP addresses or CIDRs (IPv4) whose flows get a second chance."""
    ports: tuple[int, ...]
    """TCP ports of the VIPs' listeners; empty: every port."""
    local: str
    """This host's address (the tunnel's source)."""
    peer: str
    """The peer engine host's address (UDP ``udp_port`` must pass between the two)."""
    device: str = "pw-sc"
    """The tunnel device."""
    vni: int = 5150
    udp_port: int = 4789
    mark: int = 0x5C0
    """Firewall mark of a packet that goes to the peer."""
    table: int = 5150
    """Routing table holding the route to the peer (the arm switch)."""
    rule_pref: int = 90
    local_pref: int = 100
    """Where the ``local`` table's rule moves (it must come after ``rule_pref``)."""
    mss: int = 1410
    """Clamp the MSS the VIPs announce so a full segment plus the 50 bytes of
    VXLAN fits a 1500-byte path; 0: no clamp (jumbo frames between the hosts)."""


def peer_of(local: str, peer: str, pair: Sequence[str]) -> str:
    """The peer from ``--peer``, or from ``--pair`` (both hosts: the one that is not ``local``);
    exactly one of the two ways, or a one-line ``ConfigError``."""
    if pair and peer:
        raise ConfigError("second chance: give --peer or --pair, not both")
    if not pair:
        if not peer:
            raise ConfigError("second chance: the peer is missing (--peer, or --pair twice)")
        return peer
    if len(pair) != 2 or pair[0] == pair[1]:
        raise ConfigError(f"second chance: --pair names two different hosts, not "
                          f"{', '.join(pair)}")
    if local not in pair:
        raise ConfigError(f"second chance: --local {local} is not one of the pair "
                          f"{pair[0]}, {pair[1]}")
    return pair[1] if pair[0] == local else pair[0]


def check(sc: SecondChance) -> None:
    """One-line ``ConfigError`` for settings that cannot work."""
    for what, text in (("local", sc.local), ("peer", sc.peer)):
        try:
            if ipaddress.ip_address(text).version != 4:
                raise ValueError
        except ValueError:
            raise ConfigError(f"second chance: {what} address {text!r} must be an IPv4 "
                              "address") from None
    if sc.local == sc.peer:
        raise ConfigError("second chance: the peer must be another host")
    if not sc.vips:
        raise ConfigError("second chance: at least one VIP is needed")
    for vip in sc.vips:
        try:
            if ipaddress.ip_network(vip, strict=True).version != 4:
                raise ValueError
        except ValueError:
            raise ConfigError(f"second chance: VIP {vip!r} must be an IPv4 address or CIDR "
                              "(IPv6 is not supported yet)") from None
    for port in sc.ports:
        if not 1 <= port <= 65535:
            raise ConfigError(f"second chance: port {port} must be 1..65535")
    if not _DEVICE.match(sc.device):
        raise ConfigError(f"second chance: {sc.device!r} is not a device name")
    if not 1 <= sc.vni < 2**24 or not 1 <= sc.udp_port <= 65535:
        raise ConfigError("second chance: VNI must be 1..16777215 and the UDP port 1..65535")
    if not 1 < sc.rule_pref < sc.local_pref < 32766:
        raise ConfigError("second chance: rule preference must be below the local table's "
                          "new preference, both in 2..32765")
    if not 0 < sc.mark < 2**32 or not 0 < sc.table < 2**31 or sc.table in (253, 254, 255):
        raise ConfigError("second chance: mark and table must be positive (table not "
                          "default/main/local)")
    if sc.mss and not 536 <= sc.mss <= 9000:
        raise ConfigError(f"second chance: MSS {sc.mss} must be 536..9000 (0: no clamp)")


def tunnel_mac(address: str) -> str:
    """The VXLAN device's MAC for the host ``address``: locally administered, unicast, so each
    side knows the other's without asking."""
    raw = ipaddress.IPv4Address(address).packed
    return "02:5c:" + ":".join(f"{b:02x}" for b in raw)


def _set(items: Sequence[str]) -> str:
    return "{ " + ", ".join(items) + " }"


def ruleset(sc: SecondChance) -> str:
    """The nftables ruleset (``nft -f``): replaces the table as one transaction."""
    check(sc)
    vips = sorted(ipaddress.ip_network(v) for v in sc.vips)
    ports = f" tcp dport {_set([str(p) for p in sorted(set(sc.ports))])}" if sc.ports else ""
    sports = ports.replace("dport", "sport")
    lines = [f"table inet {TABLE} {{}}", f"delete table inet {TABLE}",
             f"table inet {TABLE} {{",
             "    set vips {", "        type ipv4_addr; flags interval;",
             f"        elements = {_set([str(v) for v in vips])}", "    }",
             "    chain prerouting {",
             "        type filter hook prerouting priority mangle; policy accept;",
             f'        iifname "{sc.device}" return']
    lines += [f"        ip daddr @vips{ports} {STRAY} meta mark set {sc.mark:#x} counter",
              "    }",
              # The kernel takes VXLAN from any source: only the peer may hand packets in
              # (anyone else could inject packets to the VIPs past the reverse-path filter).
              # Before conntrack (raw), so a forged packet leaves no state either.
              "    chain tunnel {",
              "        type filter hook prerouting priority raw; policy accept;",
              f"        udp dport {sc.udp_port} fib daddr type local ip saddr != {sc.peer} "
              "counter drop",
              "    }"]
    if sc.mss:
        lines += ["    chain postrouting {",
                  "        type filter hook postrouting priority mangle; policy accept;",
                  f"        ip saddr @vips{sports} tcp flags & (syn | ack) == syn | ack "
                  f"tcp option maxseg size > {sc.mss} tcp option maxseg size set {sc.mss}",
                  "    }"]
    lines += ["}", ""]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Step:
    argv: tuple[str, ...]
    may_fail: bool = False  # already done / already gone


def _s(*argv: str, may_fail: bool = False) -> Step:
    return Step(tuple(argv), may_fail)


def link_steps(sc: SecondChance) -> list[Step]:
    """The tunnel (``SecondChanceHost`` first removes one of its own left by a crash, and
    refuses to touch a device of that name that is not its tunnel) and the policy rules; the
    local table's rule moves after them. The rule steps are idempotent."""
    check(sc)
    steps = [
        _s("ip", "link", "add", sc.device, "type", "vxlan", "id", str(sc.vni), "local",
           sc.local, "remote", sc.peer, "dstport", str(sc.udp_port), "nolearning"),
        _s("ip", "link", "set", sc.device, "address", tunnel_mac(sc.local), "up"),
        # The peer's packets arrive here with the client's source: the reverse-path filter
        # must be loose on the tunnel whatever conf/all says (the kernel takes the larger of
        # the two), and loose still drops everything on a device with no IPv4 address.
        _s("sysctl", "-qw", f"net.ipv4.conf.{sc.device}.rp_filter=2"),
        _s("ip", "addr", "replace", f"{sc.local}/32", "dev", sc.device, "noprefixroute"),
    ]
    return [
        *steps,
        *(_s("ip", "rule", "del", *rule, may_fail=True) for rule in _rules(sc)),
        *(_s("ip", "rule", "add", *rule) for rule in _rules(sc)),
        _s("ip", "rule", "add", "pref", str(sc.local_pref), "lookup", "local", may_fail=True),
        _s("ip", "rule", "del", "pref", "0", "lookup", "local", may_fail=True),
    ]


def _rules(sc: SecondChance) -> tuple[tuple[str, ...], ...]:
    """The policy rules, exactly: deleting them names every selector, so a rule someone else
    put at the same preference is never taken for ours."""
    mark = f"{sc.mark:#x}"
    # VXLAN routes its outer packet with the inner packet's mark: that one (sent by this host,
    # "iif lo") takes the main table, or it would be routed into its own tunnel.
    return (("pref", str(sc.rule_pref - 1), "fwmark", mark, "iif", "lo", "lookup", "main"),
            ("pref", str(sc.rule_pref), "fwmark", mark, "lookup", str(sc.table)))


def arm_steps(sc: SecondChance) -> list[Step]:
    """Route marked packets into the tunnel to the peer."""
    return [_s("ip", "neigh", "replace", sc.peer, "lladdr", tunnel_mac(sc.peer), "dev",
               sc.device, "nud", "permanent"),
            _s("ip", "route", "replace", "default", "via", sc.peer, "dev", sc.device,
               "onlink", "table", str(sc.table))]


def disarm_steps(sc: SecondChance) -> list[Step]:
    """No route to the peer: marked packets fall through to the local stack."""
    return [_s("ip", "route", "flush", "table", str(sc.table), may_fail=True)]


def remove_steps(sc: SecondChance) -> list[Step]:
    """Undo ``link_steps``, ``arm_steps`` and the ruleset; every step may find it gone. The
    tunnel goes last (``SecondChanceHost`` deletes it only when it is its own)."""
    return [_s("nft", "delete", "table", "inet", TABLE, may_fail=True),
             *disarm_steps(sc),
             *(_s("ip", "rule", "del", *rule, may_fail=True) for rule in _rules(sc)),
             # the local table's rule back at 0 before the moved one goes: never without it
             _s("ip", "rule", "add", "pref", "0", "lookup", "local", may_fail=True),
             _s("ip", "rule", "del", "pref", str(sc.local_pref), "lookup", "local",
                may_fail=True),
             _s("ip", "link", "del", sc.device, may_fail=True)]


SYSCTLS = {"net.ipv4.ip_forward": "1"}
"""What the host needs while installed (the value it had comes back on removal): it forwards
the marked packets."""


@dataclass
class SecondChanceHost:
    """Installs, arms, disarms and removes second chance on one host; ``prefix`` runs the
    commands elsewhere (the test beds: ``ip netns exec NS``)."""

    settings: SecondChance
    prefix: tuple[str, ...] = ()
    _saved: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    armed: bool = field(default=False, init=False)

    async def _run(self, step: Step, *, stdin: str | None = None) -> str:
        try:
            code, out, _ = await run_command(
                *self.prefix, *step.argv, stdin=stdin.encode() if stdin is not None else None,
                stderr=asyncio.subprocess.STDOUT)
        except FileNotFoundError:
            if step.may_fail:
                return ""
            raise EnvironmentProblem(f"second chance needs {step.argv[0]} (iproute2, procps, "
                                     "nftables)") from None
        text = out.decode(errors="replace").strip()
        if code != 0 and not step.may_fail:
            raise EnvironmentProblem(f"second chance: {' '.join(step.argv)}: {text}")
        return text

    async def install(self) -> None:
        """Tunnel, rules, ruleset and sysctls; armed afterwards. Removes what it made if a
        step fails."""
        sc = self.settings
        check(sc)
        ours = await self._tunnel()
        if ours is False:
            raise EnvironmentProblem(f"second chance: device {sc.device} exists and is not its "
                                     "VXLAN tunnel (choose another --device)")
        try:
            if ours:  # left by a run that crashed
                await self._run(_s("ip", "link", "del", sc.device))
            for name, value in SYSCTLS.items():
                if name not in self._saved:
                    self._saved[name] = await self._run(_s("sysctl", "-n", name))
                await self._run(_s("sysctl", "-qw", f"{name}={value}"))
            for step in link_steps(sc):
                await self._run(step)
            await self._run(_s("nft", "-f", "-"), stdin=ruleset(sc))
            await self.arm()
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.remove())
            raise

    async def _tunnel(self) -> bool | None:
        """Whether ``device`` is this tunnel (None: no such device)."""
        out = await self._run(_s("ip", "-d", "link", "show", "dev", self.settings.device,
                                 may_fail=True))
        if not re.match(rf"\d+: {re.escape(self.settings.device)}[:@]", out):
            return None
        return f"vxlan id {self.settings.vni} " in out

    async def arm(self) -> None:
        for step in arm_steps(self.settings):
            await self._run(step)
        self.armed = True

    async def disarm(self) -> None:
        for step in disarm_steps(self.settings):
            await self._run(step)
        self.armed = False

    async def remove(self) -> None:
        steps = remove_steps(self.settings)
        if not await self._tunnel():
            steps = [s for s in steps if s.argv[:3] != ("ip", "link", "del")]
        for step in steps:
            await self._run(step)
        for name, value in self._saved.items():
            await self._run(_s("sysctl", "-qw", f"{name}={value}", may_fail=True))
        self._saved.clear()
        self.armed = False

    async def forwarded(self) -> int:
        """Packets handed to the peer so far (the ruleset's counter)."""
        out = await self._run(_s("nft", "list", "chain", "inet", TABLE, "prerouting",
                                 may_fail=True))
        found = re.search(r"counter packets (\d+)", out)
        return int(found.group(1)) if found else 0


async def follow_peer(host: SecondChanceHost, alive: Callable[[], Awaitable[bool]], *,
                      interval: float = 0.1, fall: int = 3, rise: int = 2) -> None:
    """Keep second chance armed while ``alive()`` holds: disarm after ``fall`` failed checks in
    a row (a dead peer's flows then get a reset at once instead of vanishing into it), arm again
    after ``rise`` good ones. Runs until cancelled."""
    streak = 0
    while True:
        ok = await alive()
        streak = streak + 1 if ok != host.armed else 0
        if streak >= (rise if not host.armed else fall):
            streak = 0
            log.warning("second chance: peer %s %s", host.settings.peer,
                        "alive: armed" if ok else "silent: disarmed")
            await (host.arm() if ok else host.disarm())
        await asyncio.sleep(interval)
