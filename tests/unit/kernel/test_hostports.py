"""``podway.programs.kernel.HostPorts``: members on this host's NodePortLocal ports → pods."""

from __future__ import annotations

import json

import pytest

from podway.kernel.plan import Backend, Service
from podway.programs.agent.rules.base import CommandMissing, RulesError
from podway.programs.kernel import HostPorts

ADDR = json.dumps([{"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1"}]},
                   {"ifname": "eth0", "addr_info": [{"family": "inet", "local": "198.18.0.1"}]}])
# What ``nft -j list table ip podway`` prints for one mapping (the agent's own layout).
NPL = json.dumps({"nftables": [
    {"map": {"name": "npl_tcp", "elem": [[61001, {"concat": ["10.1.0.5", 8080]}]]}},
    {"map": {"name": "npl_udp"}},
    *({"rule": {"chain": hook}} for hook in ("prerouting", "output") for _ in range(2))]})


def web(*backends: Backend) -> tuple[Service, ...]:
    return (Service(name="web", address="198.18.0.10", port=80, protocol="tcp", affinity=False,
                    transparent=False, backends=backends, pools=("p",)),)


async def test_a_member_on_a_local_address_becomes_its_pod_and_others_stay() -> None:
    calls: list[tuple[str, ...]] = []

    async def run(*args: str, stdin: str = "") -> str:
        calls.append(args)
        return ADDR if args[0] == "ip" else NPL

    ports = HostPorts()
    ports.runner.run = run  # type: ignore[method-assign]
    remote = web(Backend("198.18.9.9", 61001))
    assert await ports(remote) == remote  # no local member: the agent's table is not read
    assert [c[0] for c in calls] == ["ip"]
    (got,) = await ports(web(Backend("198.18.0.1", 61001, 3), Backend("198.18.9.9", 61001)))
    assert got.backends == (Backend("10.1.0.5", 8080, 3), Backend("198.18.9.9", 61001))
    assert [c[0] for c in calls] == ["ip", "nft"]  # addresses read once within every_s


async def test_without_the_agent_or_ip_members_stay_as_they_are(
        caplog: pytest.LogCaptureFixture) -> None:
    async def no_agent(*args: str, stdin: str = "") -> str:
        if args[0] == "nft":
            raise RulesError("nft: No such file or directory")
        return ADDR

    ports = HostPorts()
    ports.runner.run = no_agent  # type: ignore[method-assign]
    local = web(Backend("198.18.0.1", 61001))
    assert await ports(local) == local

    async def no_ip(*args: str, stdin: str = "") -> str:
        raise CommandMissing("ip is not installed")

    ports = HostPorts()
    ports.runner.run = no_ip  # type: ignore[method-assign]
    assert await ports(local) == local
    assert await ports(local) == local
    assert sum("not resolved" in r.message for r in caplog.records) == 1
