"""L2 second chance: while an L2 speaker takes a VIP from a live old owner on the same segment,
it passes the old owner's strays back to it.

A client's neighbour cache moves at the new owner's announcement, between any two packets of a
connection: a connection whose SYN went to the old owner can send its next packets here, where
the stack knows no such connection and answers RST. For the old owner's drain window (it keeps
the VIP on its interface until it hears that this host holds it, and delivers to its sockets
meanwhile), a packet for the VIP that is not a connection's first SYN and that conntrack here
does not know (``ct state new,invalid``: the match second chance uses for BGP/VRRP,
``podway.programs.vip.secondchance.STRAY``) is copied to the old owner on the link (nftables
``dup to <its address> device <interface>``: the copy goes to its MAC, the packet unchanged, so
the old owner's socket takes it and answers the client directly) and dropped here. SYNs are
always served here; this host's own connections are known to conntrack (it took their SYNs
after the rule was in), so only strays go.

Nothing is tunnelled or forwarded (the host's forwarding setting is left alone), and it works
for IPv4 and for link-local IPv6 VIPs alike. The old owner says which of its addresses to use in
its heartbeats (``via``: per VIP it holds, an address of the same family on the VIP's interface
that is not a VIP); the nftables tables (``ip``/``ip6 podway_l2_chance``) hold exactly the VIPs
being handed back, are replaced as one transaction, and are deleted when none is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from podway.base.children import run_command
from podway.programs.vip.secondchance import STRAY

log = logging.getLogger(__name__)

TABLE = "podway_l2_chance"
_DEVICE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


@dataclass(frozen=True, slots=True)
class HandBack:
    vip: str
    via: str  # the old owner's address on the link (same family as the VIP)
    device: str  # this host's interface towards it
    node: str = ""  # the old owner


def valid(back: HandBack) -> bool:
    """Addresses of one family, a device name: nothing else may reach the ruleset (the
    heartbeat is authenticated, but a peer's text still goes into nft)."""
    try:
        vip, via = ipaddress.ip_address(back.vip), ipaddress.ip_address(back.via)
    except ValueError:
        return False
    return vip.version == via.version and vip != via and bool(_DEVICE.match(back.device))


def ruleset(backs: Iterable[HandBack]) -> str:
    """Both tables replaced as one transaction; a family with no hand-back has no table."""
    lines = []
    by_family: dict[str, list[HandBack]] = {"ip": [], "ip6": []}
    for back in sorted(set(backs), key=lambda b: (b.vip, b.via, b.device)):
        if valid(back):
            by_family["ip6" if ":" in back.vip else "ip"].append(back)
    for family, chosen in by_family.items():
        lines += [f"table {family} {TABLE} {{}}", f"delete table {family} {TABLE}"]
        if not chosen:
            continue
        lines += [f"table {family} {TABLE} {{", "    chain prerouting {",
                  # after conntrack (-200): it has looked the packet up
                  "        type filter hook prerouting priority mangle; policy accept;"]
        lines += [f'        {family} daddr {b.vip} {STRAY} counter dup to {b.via} device '
                  f'"{b.device}" drop' for b in chosen]
        lines += ["    }", "}"]
    return "\n".join(lines) + "\n"


def own_address(listing: str, vip: str, vips: Iterable[str]) -> str | None:
    """From ``ip -j addr show dev IF``: an address of ``vip``'s family on the interface that is
    no VIP, for a peer to send strays to (IPv6: a link-local one, always on-link)."""
    want = ipaddress.ip_address(vip)
    skip = {ipaddress.ip_address(v) for v in vips} | {want}
    try:
        links = json.loads(listing or "[]")
    except ValueError:
        return None
    for link in links:
        for info in link.get("addr_info", ()):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                address = ipaddress.ip_address(info["local"])
                if address.version != want.version or address in skip:
                    continue
                if address.version == 6 and not address.is_link_local:
                    continue
                return str(address)
    return None


async def _run(*argv: str, stdin: str | None = None) -> tuple[int, str]:
    try:
        code, out, _ = await run_command(
            *argv, stdin=stdin.encode() if stdin is not None else None,
            stderr=asyncio.subprocess.STDOUT)
    except FileNotFoundError:
        return 127, f"{argv[0]} is not installed"
    return code, out.decode(errors="replace").strip()


async def address_for(interface: str, vip: str, vips: Iterable[str]) -> str | None:
    """``own_address`` of this host on ``interface`` (None: none, or ``ip`` failed)."""
    code, out = await _run("ip", "-j", "-6" if ":" in vip else "-4", "addr", "show", "dev",
                           interface)
    return own_address(out, vip, vips) if code == 0 else None


@dataclass
class L2Chance:
    """The hand-backs in force on this host (VIP → hand-back, since when)."""

    backs: dict[str, tuple[HandBack, float]] = field(default_factory=dict)
    failed: bool = field(default=False, init=False)

    async def _apply(self, *, warn: bool = True) -> None:
        code, out = await _run("nft", "-f", "-",
                               stdin=ruleset(b for b, _ in self.backs.values()))
        if code != 0:
            if warn and not self.failed:  # once, until it works again
                log.warning("l2: second chance not in force (nft: %s); a connection crossing "
                            "a hand-over may be reset", out.splitlines()[0] if out else code)
            self.failed = self.failed or warn
            return
        self.failed = False

    async def take(self, back: HandBack, now: float) -> None:
        """Pass ``back.vip``'s strays to its old owner from now on."""
        if not valid(back):
            log.warning("l2: no second chance for %s via %r on %r", back.vip, back.via,
                        back.device)
            return
        self.backs[back.vip] = (back, now)
        await self._apply()
        if not self.failed:
            log.warning("l2: strays for %s go back to %s (%s on %s)", back.vip, back.node,
                        back.via, back.device)

    async def prune(self, holds: Mapping[str, set[str]], mine: set[str], *, now: float,
                    limit_s: float) -> None:
        """Keep a hand-back while its old owner is alive and holds the VIP (``holds``: what
        each live peer says it holds), this host has it (``mine``), for ``limit_s`` at most."""
        gone = [v for v, (back, since) in self.backs.items()
                if v not in mine or v not in holds.get(back.node, ()) or now - since > limit_s]
        if not gone:
            return
        passed = await self.passed()
        for vip in gone:
            back, _ = self.backs.pop(vip)
            log.warning("l2: strays for %s no longer go to %s (%d packets passed back)", vip,
                        back.node, passed.get(vip, 0))
        await self._apply()

    async def passed(self) -> dict[str, int]:
        """Packets passed back so far, per VIP (the rules' counters)."""
        out: dict[str, int] = {}
        for family in ("ip", "ip6"):
            code, text = await _run("nft", "list", "table", family, TABLE)
            for found in re.finditer(r"daddr (\S+) .*counter packets (\d+)", text if code == 0
                                     else ""):
                with contextlib.suppress(ValueError):
                    vip = str(ipaddress.ip_address(found.group(1)))
                    out[vip] = out.get(vip, 0) + int(found.group(2))
        return out

    async def clear(self, *, quiet: bool = False) -> None:
        """Nothing left behind (also a crashed run's tables); ``quiet``: no warning when nft
        is missing (at start, before any hand-over needs it)."""
        self.backs.clear()
        await self._apply(warn=not quiet)
