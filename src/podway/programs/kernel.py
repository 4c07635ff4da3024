"""The kernel engine's I/O on the host: its nftables writer, cleanup, dump and counters.

``podway.kernel`` stays pure of these choices (it gets a ``write`` function); here they are
made with the NodePortLocal agent's own parts: libnftables in-process when installed (one
long-lived context, no process per change), ``nft -f -`` otherwise, ``nft`` for reads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from podway.engines.member_health import HostKey, HostState
from podway.kernel import ruleset
from podway.kernel.engine import KernelEngine
from podway.kernel.plan import LocalPorts, Service, StaleFlows, through_local_ports
from podway.programs.agent.rules.base import CommandMissing, CommandRunner, RulesError

log = logging.getLogger(__name__)


View = Mapping[HostKey, HostState]


def kernel_view(kernel: KernelEngine | None) -> View | None:
    """The kernel engine's own view of the pools of the listeners it serves (None: it does
    not run or has installed nothing yet)."""
    if kernel is None or kernel.installed is None:
        return None
    mine = {p for s in kernel.services for p in s.pools}
    return MappingProxyType({k: v for k, v in kernel.view().items() if k[0] in mine})


def beside_kernel(proxy: View, kernel: KernelEngine | None) -> View:
    """A proxy engine's view (HAProxy's) with the kernel engine's for the pools of the
    listeners the kernel serves beside it: one host's view of every member."""
    if kernel is None:
        return proxy
    mine = {p for s in kernel.services for p in s.pools}
    merged = {k: v for k, v in proxy.items() if k[0] not in mine}
    merged.update({k: v for k, v in kernel.view().items() if k[0] in mine})
    return MappingProxyType(merged)


@dataclass(slots=True)
class Writer:
    """Writes rulesets; ``close`` frees the libnftables context (if one was made)."""

    write: Callable[[str], Awaitable[None]]
    close: Callable[[], None]
    kind: str  # "libnftables" | "nft"


def writer(*, netns: str | None = None, lib: bool = True) -> Writer:
    """libnftables when installed and ``lib``, else ``nft -f -`` (in ``netns`` if given)."""
    from podway.programs.agent.rules import libnft

    if lib and libnft.available():
        context = libnft.LibNftables(netns=netns)
        return Writer(write=context.run, close=context.close, kind="libnftables")
    runner = CommandRunner(netns=netns)

    async def write(payload: str) -> None:
        await runner.run("nft", "-f", "-", stdin=payload)

    return Writer(write=write, close=lambda: None, kind="nft")


async def dump(*, netns: str | None = None, table: str = ruleset.TABLE) -> str | None:
    """The installed table as ``nft list`` prints it; None when there is none."""
    try:
        return await CommandRunner(netns=netns).run("nft", "list", "table", "ip", table)
    except CommandMissing:
        raise
    except RulesError:
        return None


async def cleanup(*, netns: str | None = None, table: str = ruleset.TABLE) -> bool:
    """Remove the kernel engine's table; True when there was one."""
    if await dump(netns=netns, table=table) is None:
        return False
    await CommandRunner(netns=netns).run("nft", "-f", "-", stdin=ruleset.cleanup(table))
    return True


def forgetter(*, netns: str | None = None) -> Callable[[tuple[StaleFlows, ...]], Awaitable[None]]:
    """Deletes the conntrack entries of stale UDP flows with the ``conntrack`` tool (when it is
    installed; without it they time out on their own, after a warning)."""
    runner = CommandRunner(netns=netns)
    warned = [False]

    async def forget(stale: tuple[StaleFlows, ...]) -> None:
        if shutil.which("conntrack") is None:
            if not warned[0]:
                warned[0] = True
                log.warning("kernel engine: conntrack is not installed: UDP flows to a member "
                            "that failed or left keep going there until they time out")
            return
        for flows in stale:
            try:
                await runner.run(*delete_args(flows))
            except RulesError as exc:
                if "0 flow entries" not in str(exc):  # exit 1 when nothing matched
                    raise
    return forget


def delete_args(flows: StaleFlows) -> tuple[str, ...]:
    """``conntrack`` arguments deleting the UDP flows DNATed from the VIP to one member."""
    vip = () if flows.address == "0.0.0.0" else ("--orig-dst", flows.address)
    return ("conntrack", "-D", "-p", "udp", *vip, "--orig-port-dst", str(flows.port),
            "--reply-src", flows.member, "--reply-port-src", str(flows.member_port))


class HostPorts:
    """The kernel engine's ``resolve``: members that are NodePortLocal ports of this very host
    become the pods behind them (``plan.through_local_ports`` says why), read from the host's
    own agent's table (``ip podway``). The host's addresses are read at most every
    ``every_s``; the agent's table at each change that has a member on one of them (while
    such a member exists the engine looks again every few seconds: a pod's address can
    change under one port)."""

    def __init__(self, *, netns: str | None = None, every_s: float = 5.0) -> None:
        self.runner = CommandRunner(netns=netns)
        self.every_s = every_s
        self._mine: frozenset[str] = frozenset()
        self._read_at: float | None = None
        self._warned = False

    async def addresses(self) -> frozenset[str]:
        """This host's IPv4 addresses (``ip -j -4 addr``)."""
        now = asyncio.get_running_loop().time()
        if self._read_at is None or now - self._read_at >= self.every_s:
            listed = json.loads(await self.runner.run("ip", "-j", "-4", "addr", "show") or "[]")
            self._mine = frozenset(str(a["local"]) for link in listed
                                   for a in link.get("addr_info", []) if "local" in a)
            self._read_at = now
        return self._mine

    async def mappings(self, mine: frozenset[str]) -> LocalPorts:
        """The agent's mappings, for each of ``mine`` (its rule DNATs any local address)."""
        from podway.programs.agent.rules import nftables as npl

        try:
            text = await self.runner.run("nft", "-j", "list", "table", "ip", npl.TABLE)
        except CommandMissing:
            raise
        except RulesError:  # no agent on this host (or not with nftables)
            return {}
        rules = npl.parse_listing(text, guard=False) or set()
        return {(r.protocol, address, r.node_port): (r.pod_ip, r.pod_port)
                for r in rules for address in mine}

    async def __call__(self, services: tuple[Service, ...]) -> tuple[Service, ...]:
        try:
            mine = await self.addresses()
        except CommandMissing as exc:  # said once: nothing to resolve without ``ip``
            if not self._warned:
                self._warned = True
                log.warning("kernel engine: members on this host's NodePortLocal ports are "
                            "not resolved to their pods: %s", exc)
            return services
        if not any(b.address in mine for s in services for b in s.backends):
            return services
        return through_local_ports(services, await self.mappings(mine))


CONNTRACK = Path("/proc/sys/net/netfilter")
WARN_AT, CALM_AT = 0.9, 0.8  # share of nf_conntrack_max: warn above the first, again once
# the table went back below the second (one line per episode, not one per look)


def conntrack_fill(folder: Path = CONNTRACK) -> tuple[int, int] | None:
    """(entries, limit) of this network namespace's conntrack table; None when unknown."""
    try:
        return (int((folder / "nf_conntrack_count").read_text()),
                int((folder / "nf_conntrack_max").read_text()))
    except (OSError, ValueError):
        return None


def fill_news(fill: tuple[int, int] | None, warned: bool) -> tuple[str | None, bool]:
    """What to say about the conntrack table now (None: nothing) and whether a warning stands.
    When it is full, new flows are dropped (every SNATed or DNATed flow needs an entry)."""
    if fill is None or fill[1] <= 0:
        return None, warned
    share = fill[0] / fill[1]
    if share >= WARN_AT and not warned:
        return (f"the conntrack table is {share:.0%} full ({fill[0]} of nf_conntrack_max "
                f"{fill[1]}): when it is full, new flows are dropped; raise "
                "net.netfilter.nf_conntrack_max (docs/kernel.md)"), True
    if share < CALM_AT and warned:
        return f"the conntrack table is back to {share:.0%} full", False
    return None, warned


async def watch_conntrack(*, every_s: float = 10.0, folder: Path = CONNTRACK) -> None:
    """Log ``fill_news`` every ``every_s`` until cancelled."""
    warned = False
    while True:
        said, warned = fill_news(conntrack_fill(folder), warned)
        if said is not None:
            (log.warning if warned else log.info)("kernel engine: %s", said)
        await asyncio.sleep(every_s)


@dataclass(frozen=True, slots=True)
class MemberCounter:
    """One member's counters: its connections (conntrack flows, always counted; None only in a
    table an older Podway made) and, when the engine runs with ``--member-traffic-counters``,
    its packets and bytes (else None)."""

    protocol: str
    address: str
    port: int
    connections: int | None
    packets: int | None = None
    bytes: int | None = None


async def counters(*, netns: str | None = None, table: str = ruleset.TABLE
                   ) -> tuple[MemberCounter, ...]:
    """Per-member connections (and packets and bytes forwarded both ways, when counted) since
    the member appeared in the table (changes keep a member's counters; the engine's start
    makes the table anew)."""
    try:
        text = await CommandRunner(netns=netns).run("nft", "-j", "list", "counters", "table",
                                                    "ip", table)
    except CommandMissing:
        raise
    except RulesError:
        return ()
    return parse_counters(text)


async def metrics_text(*, netns: str | None = None, table: str = ruleset.TABLE) -> bytes:
    """The member counters in Prometheus' text format (empty when nothing is installed)."""
    return exposition(await counters(netns=netns, table=table))


SERIES = (  # (metric, what it counts, MemberCounter field)
    ("podway_kernel_member_connections_total", "Connections (conntrack flows, UDP ones "
     "included) the kernel engine DNATed to a member", "connections"),
    ("podway_kernel_member_packets_total", "Packets the kernel engine forwarded to and from a "
     "member (both directions; only with --member-traffic-counters)", "packets"),
    ("podway_kernel_member_bytes_total", "Bytes the kernel engine forwarded to and from a "
     "member (both directions; only with --member-traffic-counters)", "bytes"),
)


def exposition(found: tuple[MemberCounter, ...]) -> bytes:
    """Member counters → Prometheus text: connections per member, and packets and bytes (both
    directions) for members that have them; a series nobody has is left out."""
    lines = []
    for metric, what, field in SERIES:
        values = [(c, getattr(c, field)) for c in found if getattr(c, field) is not None]
        if not values:
            continue
        lines += [f"# HELP {metric} {what}, since it appeared in the table (or the engine's "
                  "start).", f"# TYPE {metric} counter"]
        lines += [f'{metric}{{protocol="{c.protocol}",member="{c.address}:{c.port}"}} {value}'
                  for c, value in values]
    return ("\n".join(lines) + "\n").encode() if lines else b""


def parse_counters(text: str) -> tuple[MemberCounter, ...]:
    """``nft -j list counters`` → the member counters (named ``ruleset.counter_name``), one
    per member with each kind it has."""
    kinds: dict[tuple[str, str, int], dict[str, int]] = {}
    for item in json.loads(text).get("nftables", []):
        found = item.get("counter")
        if not isinstance(found, dict):
            continue
        kind, _, rest = str(found.get("name", "")).partition("_")
        if kind not in (ruleset.CONNECTIONS, ruleset.TRAFFIC) or not rest:
            continue
        proto, *octets, port = rest.split("_")
        if len(octets) != 4:
            continue
        got = kinds.setdefault((proto, ".".join(octets), int(port)), {})
        if kind == ruleset.CONNECTIONS:
            got["connections"] = int(found.get("packets", 0))  # one packet a flow (ruleset)
        else:
            got["packets"] = int(found.get("packets", 0))
            got["bytes"] = int(found.get("bytes", 0))
    return tuple(MemberCounter(protocol=p, address=a, port=port,
                               connections=got.get("connections"),
                               packets=got.get("packets"), bytes=got.get("bytes"))
                 for (p, a, port), got in sorted(kinds.items()))
