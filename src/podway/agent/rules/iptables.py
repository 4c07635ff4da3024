"""iptables fallback: nat chain ``PODWAY-NPL``, jumped to from PREROUTING and OUTPUT for
local destinations, one DNAT rule per mapping (linear per packet: prefer nftables at scale).

Everything goes through ``iptables-restore --noflush`` in batches, never one ``iptables`` call
per rule. Declaring ``:PODWAY-NPL`` in a payload creates the chain or flushes it, so a full sync
is atomic for our chain and leaves every other rule of the nat table alone. Rule lines are
written exactly as ``iptables-save`` prints them, so reading back is a set comparison.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from podway.agent.rules.base import KernelRules
from podway.agent.types import Rule

CHAIN = "PODWAY-NPL"
JUMPS = tuple(f"-A {hook} -m addrtype --dst-type LOCAL -j {CHAIN}"
              for hook in ("PREROUTING", "OUTPUT"))
_RULE = re.compile(rf"^-A {CHAIN} -p (tcp|udp) -m (?:tcp|udp) --dport (\d+) "
                   r"-j DNAT --to-destination ([0-9.]+):(\d+)$")


def rule_line(rule: Rule, op: str = "-A") -> str:
    return (f"{op} {CHAIN} -p {rule.protocol} -m {rule.protocol} --dport {rule.node_port} "
            f"-j DNAT --to-destination {rule.pod_ip}:{rule.pod_port}")


def full_payload(rules: Iterable[Rule], *, present_jumps: Iterable[str] = ()) -> str:
    """Flush-and-fill our chain; add the jumps that are not there yet."""
    have = set(present_jumps)
    lines = ["*nat", f":{CHAIN} - [0:0]"]
    lines += [jump for jump in JUMPS if jump not in have]
    lines += [rule_line(rule) for rule in sorted(rules)]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def delta_payload(*, add: Sequence[Rule], remove: Sequence[Rule]) -> str:
    lines = ["*nat"]
    lines += [rule_line(rule, "-D") for rule in sorted(remove)]
    lines += [rule_line(rule) for rule in sorted(add)]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def cleanup_payload(*, present_jumps: Iterable[str], chain_exists: bool) -> str:
    have = set(present_jumps)
    lines = ["*nat"]
    lines += [jump.replace("-A ", "-D ", 1) for jump in JUMPS if jump in have]
    if chain_exists:
        lines += [f":{CHAIN} - [0:0]", f"-X {CHAIN}"]
    if len(lines) == 1:
        return ""
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def parse_save(text: str) -> tuple[set[Rule], set[str], bool]:
    """From ``iptables-save -t nat``: our rules, our jumps present, whether our chain exists."""
    rules: set[Rule] = set()
    jumps: set[str] = set()
    exists = False
    for line in text.splitlines():
        if line.startswith(f":{CHAIN} "):
            exists = True
        elif line in JUMPS:
            jumps.add(line)
        elif match := _RULE.match(line):
            proto, node_port, ip, port = match.groups()
            rules.add(Rule(protocol="tcp" if proto == "tcp" else "udp",
                           node_port=int(node_port), pod_ip=ip, pod_port=int(port)))
    return rules, jumps, exists


class IptablesRules(KernelRules):
    name = "iptables"

    async def _save(self) -> tuple[set[Rule], set[str], bool]:
        return parse_save(await self.runner.run("iptables-save", "-t", "nat"))

    async def _restore(self, payload: str) -> None:
        if payload:
            await self.runner.run("iptables-restore", "--noflush", stdin=payload)

    async def _sync_locked(self) -> None:
        _, jumps, _ = await self._save()
        await self._restore(full_payload(self.desired.values(), present_jumps=jumps))

    async def _apply_locked(self, *, add: Sequence[Rule], remove: Sequence[Rule]) -> None:
        await self._restore(delta_payload(add=add, remove=remove))

    async def _cleanup_locked(self) -> None:
        _, jumps, exists = await self._save()
        await self._restore(cleanup_payload(present_jumps=jumps, chain_exists=exists))

    async def _read(self) -> set[Rule] | None:
        rules, jumps, exists = await self._save()
        if not exists or jumps != set(JUMPS):
            return None
        return rules
