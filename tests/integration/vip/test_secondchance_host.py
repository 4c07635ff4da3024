"""Second chance on a real kernel (a throwaway network namespace): install creates the tunnel,
rules and ruleset; remove leaves the namespace exactly as it found it (rules, links, nftables,
ip_forward), also when run by a fresh process after a crash, and twice; a device that is not its
tunnel is never touched; the command follows the peer's health and cleans up on SIGTERM."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from podway.base.errors import EnvironmentProblem
from podway.programs.vip.secondchance import SecondChance, SecondChanceHost
from tests.integration.vip.bed import sh, unavailable

pytestmark = pytest.mark.netns
SC = SecondChance(vips=("198.18.60.1",), ports=(8080,), local="198.18.51.2",
                  peer="198.18.52.2")


@pytest.fixture
def ns() -> Iterator[str]:
    why = unavailable("vrrp")
    if why is not None:
        pytest.skip(why)
    name = f"pwvip{uuid.uuid4().hex[:6]}-sc"
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "link", "set", "lo", "up", ns=name)
        sh("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1", ns=name)
        sh("ip", "addr", "add", "198.18.51.2/24", "dev", "eth0", ns=name)
        sh("ip", "link", "set", "eth0", "up", ns=name)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def state(ns: str) -> tuple[str, str, str, str]:
    """Rules, links with their addresses and every routing table, nftables, ip_forward."""
    return (sh("ip", "rule", ns=ns),
            sh("ip", "-o", "addr", ns=ns) + sh("ip", "route", "show", "table", "all", ns=ns),
            sh("nft", "list", "ruleset", ns=ns), sh("sysctl", "-n", "net.ipv4.ip_forward", ns=ns))


async def test_install_then_remove_restores_the_namespace(ns: str) -> None:
    before = state(ns)
    host = SecondChanceHost(SC, prefix=("ip", "netns", "exec", ns))
    await host.install()
    rules = sh("ip", "rule", ns=ns)
    assert "90:\tfrom all fwmark 0x5c0 lookup 5150" in rules
    assert "100:\tfrom all lookup local" in rules
    assert not rules.startswith("0:\t")  # moved, not copied
    assert "\n0:\t" not in rules
    assert "vxlan id 5150" in sh("ip", "-d", "link", "show", "pw-sc", ns=ns)
    assert "default via 198.18.52.2 dev pw-sc onlink" in sh(
        "ip", "route", "show", "table", "5150", ns=ns)
    assert sh("sysctl", "-n", "net.ipv4.ip_forward", ns=ns).strip() == "1"
    assert await host.forwarded() == 0
    await host.disarm()
    assert sh("ip", "route", "show", "table", "5150", ns=ns).strip() == ""
    await host.remove()
    assert state(ns) == before
    await host.remove()  # twice: nothing left to remove, no error
    assert state(ns) == before


async def test_a_rule_of_someone_else_at_the_same_preference_is_left_alone(ns: str) -> None:
    """Install and remove delete only their own policy rules, not one another tool put at
    preference 90 (or 89)."""
    sh("ip", "rule", "add", "pref", "90", "fwmark", "0x1", "lookup", "77", ns=ns)
    sh("ip", "rule", "add", "pref", "89", "lookup", "78", ns=ns)
    before = state(ns)
    host = SecondChanceHost(SC, prefix=("ip", "netns", "exec", ns))
    await host.install()
    assert "90:\tfrom all fwmark 0x1 lookup 77" in sh("ip", "rule", ns=ns)
    await host.remove()
    assert state(ns) == before


async def test_a_fresh_process_removes_what_a_crashed_one_installed(ns: str) -> None:
    """A restarted process installs over a crashed one's leftovers and removes them, or removes
    them outright (`--remove`)."""
    before = state(ns)
    await SecondChanceHost(SC, prefix=("ip", "netns", "exec", ns)).install()
    again = SecondChanceHost(SC, prefix=("ip", "netns", "exec", ns))
    await again.install()
    assert again.armed
    await SecondChanceHost(SC, prefix=("ip", "netns", "exec", ns)).remove()
    after = state(ns)
    # everything but ip_forward, whose earlier value only the installing process knew
    assert after[:3] == before[:3]


async def test_a_device_that_is_not_its_tunnel_is_refused_and_left_alone(ns: str) -> None:
    """`--device eth0` (a mistake): one clear error, nothing installed, eth0 not deleted —
    not by the refused install, not by a removal."""
    before = state(ns)
    host = SecondChanceHost(dataclasses.replace(SC, device="eth0"),
                            prefix=("ip", "netns", "exec", ns))
    with pytest.raises(EnvironmentProblem, match="device eth0 exists and is not its VXLAN"):
        await host.install()
    assert state(ns) == before
    await host.remove()
    assert "eth0" in sh("ip", "-o", "link", ns=ns)


def test_command_follows_the_peer_and_removes_everything_on_sigterm(ns: str) -> None:
    """`podway vip second-chance` installs, disarms while --peer-url does not answer, arms
    again when it does, and on SIGTERM leaves the namespace as it found it."""
    before = state(ns)
    health = ["ip", "netns", "exec", ns, sys.executable, "-m", "podway", "echo", "--address",
              "198.18.51.2", "--port", "9000", "--log-level", "warning"]
    echo = subprocess.Popen(health, start_new_session=True)
    command = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "podway", "vip", "second-chance",
         "--local", "198.18.51.2", "--peer", "198.18.52.2", "--vip", "198.18.60.1",
         "--port", "8080", "--peer-url", "http://198.18.51.2:9000/healthz"],
        start_new_session=True)
    try:
        def armed() -> bool:  # (the kernel drops an empty table: then there is none)
            return "table 5150" in sh("ip", "route", "show", "table", "all", ns=ns)

        wait_until(armed, "armed while the peer answers")
        os.killpg(echo.pid, signal.SIGKILL)
        echo.wait()
        wait_until(lambda: not armed(), "disarmed when the peer went silent")
        assert command.poll() is None
        echo = subprocess.Popen(health, start_new_session=True)
        wait_until(armed, "armed again")
        os.killpg(command.pid, signal.SIGTERM)
        assert command.wait(30) == 0
        assert state(ns)[:3] == before[:3]
        assert state(ns)[3] == before[3]  # ip_forward as it was
    finally:
        for proc in (command, echo):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_until(check: Callable[[], bool], what: str, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never: {what}")
        time.sleep(0.05)
