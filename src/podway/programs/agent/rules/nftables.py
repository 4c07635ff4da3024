"""nftables backend: table ``ip podway``, one verdict-free DNAT map per protocol.

    map npl_tcp { type inet_service : ipv4_addr . inet_service }   # node port → pod ip . port
    chain prerouting { type nat hook prerouting priority -100; fib daddr type local
                       dnat ip to tcp dport map @npl_tcp; ... }
    chain output { same, hook output, and ip daddr != 127.0.0.0/8 }   # the node itself
    chain input { type filter hook input priority filter;
                  ct state invalid tcp dport @npl_tcp counter drop; ... }

One map lookup per packet whatever the number of mappings; a full sync replaces the whole
table in one transaction (atomic: no packet sees a half-built table); a change is one
transaction of ``delete element`` / ``add element`` lines. A packet to a NodePortLocal port that
conntrack calls invalid (a late segment outside the window) is not DNATed, so it would reach the
node's own stack, which answers it with a reset that can tear the load balancer's live
connection to the pod down: ``input`` drops it (only packets for the node itself enter that
hook; DNATed flows are forwarded and never pay for it). Transactions go through libnftables
in-process by default, ``nft -f -`` when the library is not available. No SNAT anywhere:
pods see the client's address.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from podway.programs.agent.rules.base import (
    CommandMissing,
    CommandRunner,
    KernelRules,
    RulesDenied,
    RulesError,
    refused,
)
from podway.programs.agent.rules.conntrack import Conntrack
from podway.programs.agent.rules.libnft import LibNftables
from podway.programs.agent.types import L4, PROTOCOLS, Rule

TABLE = "podway"
HOOKS = ("prerouting", "output")


def _elements(rules: Iterable[Rule], protocol: L4, *, with_values: bool = True) -> str:
    chosen = sorted(r for r in rules if r.protocol == protocol)
    if with_values:
        return ", ".join(f"{r.node_port} : {r.pod_ip} . {r.pod_port}" for r in chosen)
    return ", ".join(str(r.node_port) for r in chosen)


def full_payload(rules: Iterable[Rule]) -> str:
    """Replace table ``ip podway`` with one holding exactly ``rules`` (one transaction)."""
    rules = list(rules)
    lines = [f"table ip {TABLE} {{}}", f"delete table ip {TABLE}", f"table ip {TABLE} {{"]
    for proto in PROTOCOLS:
        elements = _elements(rules, proto)
        body = f" elements = {{ {elements} }};" if elements else ""
        lines.append(f"  map npl_{proto} {{ type inet_service : ipv4_addr . inet_service;{body} }}")
    for hook in HOOKS:
        lines.append(f"  chain {hook} {{ type nat hook {hook} priority -100; policy accept;")
        # From the node itself, 127.0.0.0/8 is "local" too, but a packet DNATed to a pod keeps
        # its loopback source and is dropped on the way out: the client would hang.
        match = "ip daddr != 127.0.0.0/8 " if hook == "output" else ""
        for proto in PROTOCOLS:
            lines.append(f"    {match}fib daddr type local dnat ip to {proto} dport map "
                         f"@npl_{proto}")
        lines.append("  }")
    lines.append("  chain input { type filter hook input priority filter; policy accept;")
    for proto in PROTOCOLS:
        lines.append(f"    ct state invalid {proto} dport @npl_{proto} counter drop")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def delta_payload(*, add: Sequence[Rule], remove: Sequence[Rule]) -> str:
    """Delete then add map elements, in one transaction."""
    lines = []
    for proto in PROTOCOLS:
        keys = _elements(remove, proto, with_values=False)
        if keys:
            lines.append(f"delete element ip {TABLE} npl_{proto} {{ {keys} }}")
    for proto in PROTOCOLS:
        elements = _elements(add, proto)
        if elements:
            lines.append(f"add element ip {TABLE} npl_{proto} {{ {elements} }}")
    return "\n".join(lines) + "\n" if lines else ""


def cleanup_payload() -> str:
    """Remove the table, whether or not it exists."""
    return f"table ip {TABLE} {{}}\ndelete table ip {TABLE}\n"


def parse_listing(text: str, *, guard: bool = True) -> set[Rule] | None:
    """Rules in ``nft -j list table ip podway`` output; None if a hook rule or map is missing
    (with ``guard``, the drift check's: the ``input`` chain's rules too; a reader of the
    mappings takes an older agent's table, which has none, as it is)."""
    items: list[dict[str, Any]] = json.loads(text).get("nftables", [])
    rules: set[Rule] = set()
    maps: set[str] = set()
    hook_rules: dict[str, int] = {}
    for item in items:
        if "map" in item:
            m = item["map"]
            maps.add(m["name"])
            proto = m["name"].removeprefix("npl_")
            if proto not in PROTOCOLS:
                continue
            for key, value in m.get("elem", []):
                addr, port = value["concat"]
                rules.add(Rule(protocol=proto, node_port=int(key), pod_ip=str(addr),
                               pod_port=int(port)))
        elif "rule" in item:
            chain = item["rule"]["chain"]
            hook_rules[chain] = hook_rules.get(chain, 0) + 1
    if maps != {f"npl_{p}" for p in PROTOCOLS}:
        return None
    if any(hook_rules.get(hook, 0) != len(PROTOCOLS)
           for hook in (*HOOKS, "input") if guard or hook != "input"):
        return None
    return rules


class NftablesRules(KernelRules):
    """Writes go through libnftables when given (fast path), else ``nft -f -``; reads always
    use ``nft -j list`` (rare: the periodic drift check)."""

    name = "nftables"

    def __init__(self, *, runner: CommandRunner, lib: LibNftables | None = None,
                 conntrack: Conntrack | None = None) -> None:
        super().__init__(runner=runner, conntrack=conntrack)
        self.lib = lib

    async def _write(self, payload: str) -> None:
        if self.lib is not None:
            await self.lib.run(payload)
        else:
            await self.runner.run("nft", "-f", "-", stdin=payload)

    async def _sync_locked(self) -> None:
        await self._write(full_payload(self.desired.values()))

    async def _apply_locked(self, *, add: Sequence[Rule], remove: Sequence[Rule]) -> None:
        await self._write(delta_payload(add=add, remove=remove))

    async def _cleanup_locked(self) -> bool:
        try:
            await self.runner.run("nft", "list", "table", "ip", TABLE)
        except CommandMissing:
            raise
        except RulesError as exc:
            if isinstance(refused(exc, "the nftables ruleset"), RulesDenied):
                raise refused(exc, "the nftables ruleset") from None
            return False  # no table: nothing was installed
        await self._write(cleanup_payload())
        return True

    def close(self) -> None:
        if self.lib is not None:
            self.lib.close()
            self.lib = None

    async def _read(self) -> set[Rule] | None:
        try:
            text = await self.runner.run("nft", "-j", "list", "table", "ip", TABLE)
        except CommandMissing:
            raise  # not "no table": repairing could not help, say why instead
        except RulesError as exc:
            if isinstance(refused(exc, "the nftables ruleset"), RulesDenied):
                raise refused(exc, "the nftables ruleset") from None
            return None  # no table at all
        return parse_listing(text)
