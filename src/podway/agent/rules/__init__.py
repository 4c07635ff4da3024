"""Kernel DNAT backends for NodePortLocal: nftables (default) and iptables (fallback)."""

from __future__ import annotations

from podway.agent.rules.base import CommandRunner, KernelRules, Rules, RulesError


def make_rules(kind: str, *, netns: str | None = None) -> KernelRules:
    """The backend called ``kind`` ("nftables" or "iptables"), acting in ``netns`` if given."""
    runner = CommandRunner(netns=netns)
    if kind == "nftables":
        from podway.agent.rules.nftables import NftablesRules

        return NftablesRules(runner=runner)
    if kind == "iptables":
        from podway.agent.rules.iptables import IptablesRules

        return IptablesRules(runner=runner)
    raise RulesError(f"unknown rules backend {kind!r} (nftables or iptables)")


__all__ = ["CommandRunner", "KernelRules", "Rules", "RulesError", "make_rules"]
