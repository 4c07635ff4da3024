"""Rule payloads are built by pure functions: assert the exact text, and parse it back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from podway.programs.agent.rules import iptables, nftables
from podway.programs.agent.rules.base import CommandMissing, CommandRunner, RulesDenied, RulesError
from podway.programs.agent.rules.conntrack import Conntrack
from podway.programs.agent.types import Rule

A = Rule(protocol="tcp", node_port=61000, pod_ip="198.18.1.2", pod_port=8080)
B = Rule(protocol="tcp", node_port=61001, pod_ip="198.18.2.2", pod_port=8080)
U = Rule(protocol="udp", node_port=61000, pod_ip="198.18.1.2", pod_port=5353)


def test_nft_full_payload_exact() -> None:
    """The full nft payload replaces the table atomically with both maps and hook chains."""
    assert nftables.full_payload([B, U, A]) == (
        "table ip podway {}\n"
        "delete table ip podway\n"
        "table ip podway {\n"
        "  map npl_tcp { type inet_service : ipv4_addr . inet_service; elements = "
        "{ 61000 : 198.18.1.2 . 8080, 61001 : 198.18.2.2 . 8080 }; }\n"
        "  map npl_udp { type inet_service : ipv4_addr . inet_service; elements = "
        "{ 61000 : 198.18.1.2 . 5353 }; }\n"
        "  chain prerouting { type nat hook prerouting priority -100; policy accept;\n"
        "    fib daddr type local dnat ip to tcp dport map @npl_tcp\n"
        "    fib daddr type local dnat ip to udp dport map @npl_udp\n"
        "  }\n"
        "  chain output { type nat hook output priority -100; policy accept;\n"
        "    ip daddr != 127.0.0.0/8 fib daddr type local dnat ip to tcp dport map @npl_tcp\n"
        "    ip daddr != 127.0.0.0/8 fib daddr type local dnat ip to udp dport map @npl_udp\n"
        "  }\n"
        "  chain input { type filter hook input priority filter; policy accept;\n"
        "    ct state invalid tcp dport @npl_tcp counter drop\n"
        "    ct state invalid udp dport @npl_udp counter drop\n"
        "  }\n"
        "}\n")


def test_nft_empty_full_payload_has_no_elements() -> None:
    """An empty rule set still installs the maps and hooks, with no elements clause."""
    payload = nftables.full_payload([])
    assert "elements" not in payload
    assert "map npl_tcp { type inet_service : ipv4_addr . inet_service; }" in payload


def test_nft_delta_payload_exact() -> None:
    """A change is one transaction: deletes by key first, then adds."""
    assert nftables.delta_payload(add=[B, U], remove=[A]) == (
        "delete element ip podway npl_tcp { 61000 }\n"
        "add element ip podway npl_tcp { 61001 : 198.18.2.2 . 8080 }\n"
        "add element ip podway npl_udp { 61000 : 198.18.1.2 . 5353 }\n")
    assert nftables.delta_payload(add=[], remove=[]) == ""


def test_nft_cleanup_payload_exact() -> None:
    """Cleanup creates-then-deletes the table so it succeeds whether or not it exists."""
    assert nftables.cleanup_payload() == "table ip podway {}\ndelete table ip podway\n"


def _listing(elements: list[object], rules_per_hook: int = 2,
             chains: Sequence[str] = ("prerouting", "output", "input")) -> str:
    items: list[dict[str, object]] = [{"metainfo": {"version": "1.0.6"}},
                                      {"table": {"family": "ip", "name": "podway"}}]
    items.append({"map": {"name": "npl_tcp", "table": "podway", "elem": elements}})
    items.append({"map": {"name": "npl_udp", "table": "podway"}})
    for chain in chains:
        items += [{"rule": {"chain": chain, "expr": []}}] * rules_per_hook
    return json.dumps({"nftables": items})


def test_nft_parse_listing() -> None:
    """The JSON listing parses back to rules; a missing hook rule means 'incomplete'."""
    text = _listing([[61000, {"concat": ["198.18.1.2", 8080]}]])
    assert nftables.parse_listing(text) == {A}
    assert nftables.parse_listing(_listing([], rules_per_hook=1)) is None
    # A table an older agent made, without the chain that drops invalid packets: incomplete,
    # so the drift check rewrites it whole.
    assert nftables.parse_listing(_listing([], chains=("prerouting", "output"))) is None


def test_iptables_full_payload_exact() -> None:
    """Full iptables sync flushes our chain, adds missing jumps, then every rule, sorted."""
    assert iptables.full_payload([U, A], present_jumps=[iptables.JUMPS[0]]) == (
        "*nat\n"
        ":PODWAY-NPL - [0:0]\n"
        "-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        "-A PODWAY-NPL -p tcp -m tcp --dport 61000 -j DNAT --to-destination 198.18.1.2:8080\n"
        "-A PODWAY-NPL -p udp -m udp --dport 61000 -j DNAT --to-destination 198.18.1.2:5353\n"
        "COMMIT\n"
        "*filter\n"
        ":PODWAY-NPL-INVALID - [0:0]\n"
        "-I INPUT 1 -m conntrack --ctstate INVALID -j PODWAY-NPL-INVALID\n"
        "-A PODWAY-NPL-INVALID -p tcp -m tcp --dport 61000 -j DROP\n"
        "-A PODWAY-NPL-INVALID -p udp -m udp --dport 61000 -j DROP\n"
        "COMMIT\n")


def test_iptables_full_payload_keeps_one_guard_jump() -> None:
    """The INVALID guard's jump is inserted only when missing; extra copies and jumps that are
    not ours exactly (an older version) are deleted, ours stays where it is."""
    other = "-A INPUT -j PODWAY-NPL-INVALID"
    payload = iptables.full_payload([], present_jumps=iptables.JUMPS, present_guard_jumps=[
        iptables.GUARD_JUMP, other, iptables.GUARD_JUMP])
    assert payload.split("COMMIT\n")[1] == (
        "*filter\n"
        ":PODWAY-NPL-INVALID - [0:0]\n"
        "-D INPUT -j PODWAY-NPL-INVALID\n"
        "-D INPUT -m conntrack --ctstate INVALID -j PODWAY-NPL-INVALID\n")


def test_iptables_delta_and_cleanup_payloads_exact() -> None:
    """Deltas delete then append in one restore; cleanup unhooks, flushes and deletes."""
    assert iptables.delta_payload(add=[B], remove=[A]) == (
        "*nat\n"
        "-D PODWAY-NPL -p tcp -m tcp --dport 61000 -j DNAT --to-destination 198.18.1.2:8080\n"
        "-A PODWAY-NPL -p tcp -m tcp --dport 61001 -j DNAT --to-destination 198.18.2.2:8080\n"
        "COMMIT\n"
        "*filter\n"
        "-D PODWAY-NPL-INVALID -p tcp -m tcp --dport 61000 -j DROP\n"
        "-A PODWAY-NPL-INVALID -p tcp -m tcp --dport 61001 -j DROP\n"
        "COMMIT\n")
    assert iptables.cleanup_payload(present_jumps=iptables.JUMPS, chain_exists=True,
                                    present_guard_jumps=[iptables.GUARD_JUMP],
                                    guard_exists=True) == (
        "*nat\n"
        "-D PREROUTING -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        "-D OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        ":PODWAY-NPL - [0:0]\n"
        "-X PODWAY-NPL\n"
        "COMMIT\n"
        "*filter\n"
        "-D INPUT -m conntrack --ctstate INVALID -j PODWAY-NPL-INVALID\n"
        ":PODWAY-NPL-INVALID - [0:0]\n"
        "-X PODWAY-NPL-INVALID\n"
        "COMMIT\n")
    # An older agent's state (nat only): nothing is written to the filter table.
    assert iptables.cleanup_payload(present_jumps=[], chain_exists=True) == (
        "*nat\n:PODWAY-NPL - [0:0]\n-X PODWAY-NPL\nCOMMIT\n")
    assert iptables.cleanup_payload(present_jumps=[], chain_exists=False) == ""


def test_iptables_parse_save_roundtrip() -> None:
    """iptables-save output parses back to exactly the rules and jumps we wrote."""
    save = "\n".join(["*nat", ":PREROUTING ACCEPT [0:0]", ":PODWAY-NPL - [0:0]",
                      "-A PREROUTING -j KUBE-SERVICES", *iptables.JUMPS,
                      iptables.rule_line(A), iptables.rule_line(U), "COMMIT"])
    assert iptables.parse_save(save) == ({A, U}, list(iptables.JUMPS), True)
    save = "\n".join(["*filter", ":INPUT ACCEPT [0:0]", ":PODWAY-NPL-INVALID - [0:0]",
                      "-A INPUT -j KUBE-FIREWALL", iptables.GUARD_JUMP,
                      iptables.guard_line(A), iptables.guard_line(U), "COMMIT"])
    assert iptables.parse_guard(save) == ({("tcp", 61000), ("udp", 61000)},
                                          [iptables.GUARD_JUMP], True)


def test_iptables_duplicate_jumps_are_counted_synced_to_one_and_all_cleaned() -> None:
    """Duplicate jumps (two agents overlapped) are all seen; sync keeps one; cleanup drops all."""
    pre, out = iptables.JUMPS
    save = "\n".join(["*nat", ":PODWAY-NPL - [0:0]", pre, out, pre, "COMMIT"])
    _, jumps, exists = iptables.parse_save(save)
    assert jumps == [pre, out, pre]
    assert iptables.full_payload([], present_jumps=jumps).split("*filter")[0] == (
        "*nat\n"
        ":PODWAY-NPL - [0:0]\n"
        "-D PREROUTING -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        "COMMIT\n")
    assert iptables.cleanup_payload(present_jumps=jumps, chain_exists=exists) == (
        "*nat\n"
        "-D PREROUTING -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        "-D OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        "-D PREROUTING -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        ":PODWAY-NPL - [0:0]\n"
        "-X PODWAY-NPL\n"
        "COMMIT\n")


class FakeRunner(CommandRunner):
    """Records payloads; fails the next ``fail`` runs; serves ``listing`` to reads."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Sequence[str], str]] = []
        self.fail = 0
        self.error = "boom"
        self.listing = ""

    async def run(self, *args: str, stdin: str = "") -> str:
        self.calls.append((args, stdin))
        if self.fail:
            self.fail -= 1
            raise RulesError(self.error)
        return self.listing if "list" in args else ""


async def test_failed_delta_falls_back_to_full_sync() -> None:
    """When an incremental change fails, the backend re-installs everything atomically."""
    runner = FakeRunner()
    rules = nftables.NftablesRules(runner=runner)
    await rules.sync([A])
    runner.fail = 1
    await rules.apply(add=[B], remove=[])
    assert runner.calls[-1][1] == nftables.full_payload([A, B])


async def test_apply_replacing_a_key_removes_the_old_rule_first() -> None:
    """Re-pointing a node port deletes the old element and adds the new one in one batch."""
    runner = FakeRunner()
    rules = nftables.NftablesRules(runner=runner)
    await rules.sync([A])
    moved = Rule(protocol="tcp", node_port=61000, pod_ip="198.18.9.9", pod_port=8080)
    await rules.apply(add=[moved], remove=[])
    assert runner.calls[-1][1] == nftables.delta_payload(add=[moved], remove=[A])
    # Removing a rule that is no longer the one installed is a no-op (recycled IP safety).
    count = len(runner.calls)
    await rules.apply(add=[], remove=[A])
    assert len(runner.calls) == count
    assert rules.desired == {moved.key: moved}


@pytest.mark.parametrize(("listing", "drifted"), [
    (_listing([[61000, {"concat": ["198.18.1.2", 8080]}]]), False),
    (_listing([]), True),
])
async def test_repair_resyncs_only_on_drift(listing: str, drifted: bool) -> None:
    """repair() rewrites the kernel only when what it reads differs from what it installed."""
    runner = FakeRunner()
    rules = nftables.NftablesRules(runner=runner)
    await rules.sync([A])
    runner.listing = listing
    assert await rules.repair(lambda: [A]) is drifted
    assert (runner.calls[-1][1] == nftables.full_payload([A])) is drifted


async def test_apply_of_an_installed_rule_changes_nothing() -> None:
    """Adding a rule that is already installed runs no command and removes nothing."""
    runner = FakeRunner()
    rules = nftables.NftablesRules(runner=runner)
    await rules.sync([A, B])
    count = len(runner.calls)
    await rules.apply(add=[A], remove=[])
    assert len(runner.calls) == count
    assert rules.desired == {A.key: A, B.key: B}


async def test_repair_installs_what_the_caller_holds_not_what_it_last_heard() -> None:
    """repair() syncs the caller's rule set even when the backend never heard of a rule."""
    runner = FakeRunner()
    rules = nftables.NftablesRules(runner=runner)
    await rules.sync([A])
    runner.listing = _listing([[61000, {"concat": ["198.18.1.2", 8080]}]])
    assert await rules.repair(lambda: [A, B]) is True
    assert runner.calls[-1][1] == nftables.full_payload([A, B])
    assert rules.desired == {A.key: A, B.key: B}


async def test_removed_and_repointed_udp_rules_forget_their_flows() -> None:
    """Re-pointing or removing a UDP rule deletes its old target's conntrack entries, not TCP's."""
    runner = FakeRunner()
    rules = nftables.NftablesRules(runner=runner,
                                   conntrack=Conntrack(runner=runner, available=True))
    await rules.sync([A, U])
    moved = Rule(protocol="udp", node_port=61000, pod_ip="198.18.9.9", pod_port=5353)
    await rules.apply(add=[moved], remove=[A])
    assert [args for args, _ in runner.calls if args[0] == "conntrack"] == [
        ("conntrack", "-D", "-p", "udp", "--orig-port-dst", "61000",
         "--reply-src", "198.18.1.2", "--reply-port-src", "5353")]
    await rules.apply(add=[], remove=[moved])
    assert runner.calls[-1][0][-3] == "198.18.9.9"


async def test_missing_conntrack_warns_once_and_rules_still_apply(
        caplog: pytest.LogCaptureFixture) -> None:
    """Without the conntrack tool a warning is logged once and rule changes still succeed."""
    runner = FakeRunner()
    rules = nftables.NftablesRules(runner=runner,
                                   conntrack=Conntrack(runner=runner, available=False))
    await rules.sync([U])
    await rules.apply(add=[], remove=[U])
    await rules.sync([U])
    await rules.apply(add=[], remove=[U])
    assert rules.desired == {}
    assert not any(args[0] == "conntrack" for args, _ in runner.calls)
    assert sum("conntrack-unavailable" in r.getMessage() for r in caplog.records) == 1


async def test_conntrack_nothing_to_delete_is_not_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    """conntrack's exit 1 for "0 flow entries have been deleted" is not logged as a failure."""
    runner = FakeRunner()
    runner.fail = 1
    runner.error = "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted."
    await Conntrack(runner=runner, available=True).forget([U])
    assert not any("conntrack-delete-failed" in r.getMessage() for r in caplog.records)
    runner.fail = 1
    runner.error = "Operation not permitted"
    await Conntrack(runner=runner, available=True).forget([U])
    assert any("conntrack-delete-failed" in r.getMessage() for r in caplog.records)


async def test_failed_apply_is_retried_not_mistaken_for_a_no_op() -> None:
    """When the delta and the fallback sync both fail, the same change retried writes again."""
    runner = FakeRunner()
    rules = nftables.NftablesRules(runner=runner)
    await rules.sync([A])
    runner.fail = 2  # the delta and the full-sync fallback
    with pytest.raises(RulesError):
        await rules.apply(add=[B], remove=[])
    assert rules.desired == {A.key: A}
    assert rules.kernel_unknown
    count = len(runner.calls)
    await rules.apply(add=[B], remove=[])
    assert len(runner.calls) == count + 1
    assert runner.calls[-1][1] == nftables.full_payload([A, B])  # state unknown: write it all
    assert not rules.kernel_unknown
    await rules.apply(add=[], remove=[B])
    assert runner.calls[-1][1] == nftables.delta_payload(add=[], remove=[B])


def test_iptables_sync_replaces_a_jump_of_an_older_version() -> None:
    """An OUTPUT jump without the loopback exclusion (older agent) is swapped for the new one."""
    old_output = "-A OUTPUT -m addrtype --dst-type LOCAL -j PODWAY-NPL"
    save = "\n".join(["*nat", ":PODWAY-NPL - [0:0]", iptables.JUMPS[0], old_output, "COMMIT"])
    _, jumps, _ = iptables.parse_save(save)
    assert iptables.full_payload([], present_jumps=jumps).split("*filter")[0] == (
        "*nat\n"
        ":PODWAY-NPL - [0:0]\n"
        "-D OUTPUT -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        "-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j PODWAY-NPL\n"
        "COMMIT\n")


async def test_missing_executable_is_a_rules_error(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing ``nft`` binary surfaces as RulesError (handled), not FileNotFoundError."""
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing installed
    with pytest.raises(CommandMissing):
        await CommandRunner().run("nft", "-j", "list", "ruleset")
    rules = nftables.NftablesRules(runner=CommandRunner())
    with pytest.raises(RulesError, match="not installed"):
        await rules.repair(lambda: [A])  # reading back must not pass for "no table"


@pytest.mark.parametrize(("backend", "error"), [
    (nftables.NftablesRules,
     "netlink: Error: cache initialization failed: Operation not permitted"),
    (iptables.IptablesRules, "iptables-save v1.8.9 (nf_tables): Could not fetch rule set "
                             "generation id: Permission denied (you must be root)"),
])
async def test_cleanup_without_privilege_says_so_instead_of_nothing_installed(
        backend: type[nftables.NftablesRules | iptables.IptablesRules], error: str) -> None:
    """A non-root `podway agent cleanup`: the kernel refused to list the rules, which is not
    "nothing installed" (the table may be there): a RulesDenied error, so the command exits 1."""
    runner = FakeRunner()
    runner.fail, runner.error = 1, error
    with pytest.raises(RulesDenied, match="permission denied"):
        await backend(runner=runner).cleanup()
    runner.fail, runner.error = 1, "Error: No such file or directory; did you mean table 'x'?"
    if backend is nftables.NftablesRules:
        assert await backend(runner=runner).cleanup() is False  # a missing table: nothing there


class SaveRunner(FakeRunner):
    """Serves ``iptables-save -t TABLE`` from ``tables``; records restores."""

    def __init__(self, tables: dict[str, str]) -> None:
        super().__init__()
        self.tables = tables

    async def run(self, *args: str, stdin: str = "") -> str:
        await super().run(*args, stdin=stdin)
        return self.tables.get(args[-1], "") if args[0] == "iptables-save" else ""


async def test_iptables_drift_check_takes_a_missing_guard_as_drift() -> None:
    """An older agent's state (DNAT chain and jumps, no INVALID guard) is drift: repair
    rewrites it with the guard; with the guard in place and matching, nothing is rewritten."""
    nat = "\n".join(["*nat", ":PODWAY-NPL - [0:0]", *iptables.JUMPS, iptables.rule_line(A),
                     "COMMIT"])
    runner = SaveRunner({"nat": nat, "filter": "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT"})
    rules = iptables.IptablesRules(runner=runner)
    assert await rules.installed() is None
    assert await rules.repair(lambda: [A]) is True
    restore = [stdin for args, stdin in runner.calls if args[0] == "iptables-restore"]
    assert restore[-1].endswith("*filter\n:PODWAY-NPL-INVALID - [0:0]\n"
                                "-I INPUT 1 -m conntrack --ctstate INVALID -j PODWAY-NPL-INVALID\n"
                                "-A PODWAY-NPL-INVALID -p tcp -m tcp --dport 61000 -j DROP\n"
                                "COMMIT\n")
    guard = ["*filter", ":PODWAY-NPL-INVALID - [0:0]", iptables.GUARD_JUMP]
    runner.tables["filter"] = "\n".join([*guard, iptables.guard_line(B), "COMMIT"])
    assert await rules.installed() is None  # guards the wrong port
    runner.tables["filter"] = "\n".join([*guard[:2], iptables.guard_line(A), "COMMIT"])
    assert await rules.installed() is None  # right port, but nothing jumps to the guard
    runner.tables["filter"] = "\n".join([*guard, iptables.guard_line(A), "COMMIT"])
    assert await rules.installed() == {A}
    calls = len(runner.calls)
    assert await rules.repair(lambda: [A]) is False
    assert all(args[0] == "iptables-save" for args, _ in runner.calls[calls:])
