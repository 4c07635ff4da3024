"""iptables fallback: nat chain ``PODWAY-NPL``, jumped to from PREROUTING and OUTPUT for
local destinations, one DNAT rule per mapping (linear per packet: prefer nftables at scale).

Everything goes through ``iptables-restore --noflush`` in batches, never one ``iptables`` call
per rule. Declaring ``:PODWAY-NPL`` in a payload creates the chain or flushes it, so a full sync
is atomic for our chain and leaves every other rule of the nat table alone. Rule lines are
written exactly as ``iptables-save`` prints them, so reading back is a set comparison.

A packet to a mapped port that conntrack calls INVALID (a late segment outside the TCP window)
is not DNATed, so it would reach the node's own stack, which answers it with a reset that can
tear the load balancer's live connection to the pod down. The filter chain ``PODWAY-NPL-INVALID``
drops it: one DROP rule per mapping, mirroring the DNAT rules, jumped to from the top of INPUT
only for INVALID packets, so a valid packet pays one conntrack-state match and the linear
chain is walked by invalid packets alone. Every payload writes the nat and the filter part.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from podway.programs.agent.rules.base import KernelRules, RulesError, refused
from podway.programs.agent.types import Rule

CHAIN = "PODWAY-NPL"
# OUTPUT skips 127.0.0.0/8: a loopback-sourced packet DNATed to a pod is dropped (it would hang).
JUMPS = (f"-A PREROUTING -m addrtype --dst-type LOCAL -j {CHAIN}",
         f"-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j {CHAIN}")
# Any jump into our chain from the two hooks, ours or not exactly ours (older versions, copies).
_JUMP = re.compile(rf"^-A (?:PREROUTING|OUTPUT) .*-j {CHAIN}$")
GUARD = "PODWAY-NPL-INVALID"
# Inserted first in INPUT, so an ACCEPT of the host's own firewall cannot let it through.
GUARD_JUMP = f"-A INPUT -m conntrack --ctstate INVALID -j {GUARD}"
_GUARD_JUMP = re.compile(rf"^-A INPUT .*-j {GUARD}$")
_GUARD_RULE = re.compile(rf"^-A {GUARD} -p (tcp|udp) -m (?:tcp|udp) --dport (\d+) -j DROP$")
_RULE = re.compile(rf"^-A {CHAIN} -p (tcp|udp) -m (?:tcp|udp) --dport (\d+) "
                   r"-j DNAT --to-destination ([0-9.]+):(\d+)$")


def rule_line(rule: Rule, op: str = "-A") -> str:
    return (f"{op} {CHAIN} -p {rule.protocol} -m {rule.protocol} --dport {rule.node_port} "
            f"-j DNAT --to-destination {rule.pod_ip}:{rule.pod_port}")


def guard_line(rule: Rule, op: str = "-A") -> str:
    return f"{op} {GUARD} -p {rule.protocol} -m {rule.protocol} --dport {rule.node_port} -j DROP"


def _guard_section(rules: Iterable[Rule], present_jumps: Iterable[str]) -> list[str]:
    """Flush-and-fill the filter chain; exactly one jump into it, inserted first in INPUT."""
    have = Counter(present_jumps)
    lines = ["*filter", f":{GUARD} - [0:0]"]
    for jump, count in sorted(have.items()):
        lines += _unhook(jump, count - (1 if jump == GUARD_JUMP else 0))
    if GUARD_JUMP not in have:
        lines.append(GUARD_JUMP.replace("-A INPUT ", "-I INPUT 1 ", 1))
    lines += [guard_line(rule) for rule in sorted(rules)]
    return [*lines, "COMMIT"]


def _unhook(jump: str, times: int) -> list[str]:
    # ``-D`` with a rule spec deletes one matching copy: repeat it once per copy.
    return [jump.replace("-A ", "-D ", 1)] * times


def full_payload(rules: Iterable[Rule], *, present_jumps: Iterable[str] = (),
                 present_guard_jumps: Iterable[str] = ()) -> str:
    """Flush-and-fill our chains; leave exactly one copy of each of our jumps.

    ``present_jumps`` (``present_guard_jumps``) lists every jump line into our nat (filter)
    chain, once per copy (two agents that overlapped leave duplicates); extra copies and jumps
    that are not ours exactly are deleted.
    """
    rules = sorted(rules)
    have = Counter(present_jumps)
    lines = ["*nat", f":{CHAIN} - [0:0]"]
    for jump, count in sorted(have.items()):
        lines += _unhook(jump, count - (1 if jump in JUMPS else 0))
    lines += [jump for jump in JUMPS if jump not in have]
    lines += [rule_line(rule) for rule in rules]
    lines.append("COMMIT")
    lines += _guard_section(rules, present_guard_jumps)
    return "\n".join(lines) + "\n"


def delta_payload(*, add: Sequence[Rule], remove: Sequence[Rule]) -> str:
    lines = ["*nat"]
    lines += [rule_line(rule, "-D") for rule in sorted(remove)]
    lines += [rule_line(rule) for rule in sorted(add)]
    lines += ["COMMIT", "*filter"]
    lines += [guard_line(rule, "-D") for rule in sorted(remove)]
    lines += [guard_line(rule) for rule in sorted(add)]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def _cleanup_section(table: str, chain: str, jumps: Iterable[str], exists: bool) -> list[str]:
    lines = [f"*{table}"]
    for jump in jumps:
        lines += _unhook(jump, 1)
    if exists:
        lines += [f":{chain} - [0:0]", f"-X {chain}"]
    return [*lines, "COMMIT"] if len(lines) > 1 else []


def cleanup_payload(*, present_jumps: Iterable[str], chain_exists: bool,
                    present_guard_jumps: Iterable[str] = (), guard_exists: bool = False) -> str:
    """Delete every copy of every jump into our chains, then the chains; "" if none is there."""
    lines = (_cleanup_section("nat", CHAIN, present_jumps, chain_exists)
             + _cleanup_section("filter", GUARD, present_guard_jumps, guard_exists))
    return "\n".join(lines) + "\n" if lines else ""


def parse_save(text: str) -> tuple[set[Rule], list[str], bool]:
    """From ``iptables-save -t nat``: our rules, every jump line into our chain (once per copy,
    in order), whether our chain exists."""
    rules: set[Rule] = set()
    jumps: list[str] = []
    exists = False
    for line in text.splitlines():
        if line.startswith(f":{CHAIN} "):
            exists = True
        elif _JUMP.match(line):
            jumps.append(line)
        elif match := _RULE.match(line):
            proto, node_port, ip, port = match.groups()
            rules.add(Rule(protocol="tcp" if proto == "tcp" else "udp",
                           node_port=int(node_port), pod_ip=ip, pod_port=int(port)))
    return rules, jumps, exists


def parse_guard(text: str) -> tuple[set[tuple[str, int]], list[str], bool]:
    """From ``iptables-save -t filter``: the (protocol, node port) pairs our filter chain
    drops, every jump line into it (once per copy, in order), whether it exists."""
    ports: set[tuple[str, int]] = set()
    jumps: list[str] = []
    exists = False
    for line in text.splitlines():
        if line.startswith(f":{GUARD} "):
            exists = True
        elif _GUARD_JUMP.match(line):
            jumps.append(line)
        elif match := _GUARD_RULE.match(line):
            ports.add((match[1], int(match[2])))
    return ports, jumps, exists


class IptablesRules(KernelRules):
    name = "iptables"

    async def _save(self) -> tuple[set[Rule], list[str], bool]:
        try:
            return parse_save(await self.runner.run("iptables-save", "-t", "nat"))
        except RulesError as exc:
            raise refused(exc, "the iptables nat table") from None

    async def _save_guard(self) -> tuple[set[tuple[str, int]], list[str], bool]:
        try:
            return parse_guard(await self.runner.run("iptables-save", "-t", "filter"))
        except RulesError as exc:
            raise refused(exc, "the iptables filter table") from None

    async def _save_both(self) -> tuple[tuple[set[Rule], list[str], bool],
                                        tuple[set[tuple[str, int]], list[str], bool]]:
        """Both tables, read side by side (two ``iptables-save`` processes at once)."""
        return await asyncio.gather(self._save(), self._save_guard())

    async def _restore(self, payload: str) -> None:
        if payload:
            await self.runner.run("iptables-restore", "--noflush", stdin=payload)

    async def _sync_locked(self) -> None:
        (_, jumps, _), (_, guard_jumps, _) = await self._save_both()
        await self._restore(full_payload(self.desired.values(), present_jumps=jumps,
                                         present_guard_jumps=guard_jumps))

    async def _apply_locked(self, *, add: Sequence[Rule], remove: Sequence[Rule]) -> None:
        await self._restore(delta_payload(add=add, remove=remove))

    async def _cleanup_locked(self) -> bool:
        (_, jumps, exists), (_, guard_jumps, guard_exists) = await self._save_both()
        payload = cleanup_payload(present_jumps=jumps, chain_exists=exists,
                                  present_guard_jumps=guard_jumps, guard_exists=guard_exists)
        if not payload:
            return False  # no chain and no jump: nothing was installed
        await self._restore(payload)
        return True

    async def _read(self) -> set[Rule] | None:
        (rules, jumps, exists), (ports, guard_jumps, guard_exists) = await self._save_both()
        if not exists or Counter(jumps) != Counter(JUMPS):  # a missing or an extra copy
            return None
        # The guard must drop exactly the mapped ports: an older agent's state has none.
        if not guard_exists or guard_jumps != [GUARD_JUMP]:
            return None
        if ports != {(rule.protocol, rule.node_port) for rule in rules}:
            return None
        return rules
