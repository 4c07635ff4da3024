"""Kernel DNAT backends for NodePortLocal: nftables (default) and iptables (fallback)."""

from __future__ import annotations

from podway.programs.agent.rules.base import CommandRunner, KernelRules, Rules, RulesError


def make_rules(kind: str, *, netns: str | None = None, nft_lib: bool = True) -> KernelRules:
    """The backend called ``kind`` ("nftables" or "iptables"), acting in ``netns`` if given.

    nftables writes through libnftables when it is installed and ``nft_lib`` is true (fast
    path), else through ``nft -f -``. Call ``close()`` on the result when done.
    """
    runner = CommandRunner(netns=netns)
    if kind == "nftables":
        from podway.programs.agent.rules import libnft
        from podway.programs.agent.rules.nftables import NftablesRules

        lib = libnft.LibNftables(netns=netns) if nft_lib and libnft.available() else None
        return NftablesRules(runner=runner, lib=lib)
    if kind == "iptables":
        from podway.programs.agent.rules.iptables import IptablesRules

        return IptablesRules(runner=runner)
    raise RulesError(f"unknown rules backend {kind!r} (nftables or iptables)")


__all__ = ["CommandRunner", "KernelRules", "Rules", "RulesError", "make_rules"]
