"""Real kernel: DNAT to pods in network namespaces, no SNAT, both backends, restart, repair."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from harness import StartAgent
from netlab import CLIENT_IP, NODE_IP, POD_IPS, Lab, netns_unavailable, sh
from tests.waiting import eventually

from builders import node_obj, pod_obj, service_obj, settled
from podway.kube.emulator import KubeEmulator
from podway.programs.agent.ports import KernelSocketOpener
from podway.programs.agent.rules import KernelRules, make_rules
from podway.programs.agent.types import Rule

pytestmark = pytest.mark.netns
_WHY = netns_unavailable()
if _WHY:
    pytest.skip(_WHY, allow_module_level=True)

TOOLS = {"nftables": "nft", "nftables-cli": "nft", "iptables": "iptables-restore"}
BACKENDS = [pytest.param(kind, marks=pytest.mark.skipif(
    shutil.which(tool) is None, reason=f"{tool} is not installed")) for kind, tool in TOOLS.items()]


def backend(kind: str, netns: str) -> KernelRules:
    """nftables via libnftables, nftables via the nft command, or iptables."""
    return make_rules(kind.removesuffix("-cli"), netns=netns, nft_lib=not kind.endswith("-cli"))
ANN = "nodeportlocal.antrea.io"
PODWAY = str(Path(sys.executable).with_name("podway"))
# The kernel engine's test client sends the raw invalid segments (``invalid`` mode).
INVALID = str(Path(__file__).parents[1] / "kernel" / "kernelclient.py")


@pytest.fixture
def lab() -> Iterator[Lab]:
    made = Lab()
    try:
        made.open()
        for pod in POD_IPS:
            made.serve(pod, "tcp", 8080)
            made.serve(pod, "udp", 5353)
        yield made
    finally:
        made.close()


def to(pod: str, node_port: int, proto: str = "tcp", pod_port: int = 8080) -> Rule:
    return Rule(protocol="tcp" if proto == "tcp" else "udp", node_port=node_port,
                pod_ip=POD_IPS[pod], pod_port=pod_port)


def leftovers(lab: Lab) -> list[str]:
    """Anything of ours still in the node namespace's kernel tables."""
    found = [line for line in sh("nft", "list", "tables", ns=lab.node).splitlines()
             if "podway" in line]
    if shutil.which("iptables-save"):
        for table in ("nat", "filter"):
            found += [line for line in sh("iptables-save", "-t", table, ns=lab.node).splitlines()
                      if "PODWAY" in line]
    return found


def hand_delete(lab: Lab, kind: str, rule: Rule) -> None:
    if kind.startswith("nftables"):
        sh("nft", "delete", "element", "ip", "podway", f"npl_{rule.protocol}",
           f"{{ {rule.node_port} }}", ns=lab.node)
    else:
        sh("iptables", "-t", "nat", "-D", "PODWAY-NPL", "-p", rule.protocol, "-m", rule.protocol,
           "--dport", str(rule.node_port), "-j", "DNAT", "--to-destination",
           f"{rule.pod_ip}:{rule.pod_port}", ns=lab.node)


@pytest.mark.parametrize("kind", BACKENDS)
async def test_client_and_node_reach_pods_without_snat(lab: Lab, kind: str) -> None:
    """Node ports DNAT to each pod (TCP, UDP); the pod sees the client's address; node works."""
    rules = backend(kind, lab.node)
    wanted = {to("pod1", 61000), to("pod2", 61001), to("pod1", 61000, "udp", 5353)}
    try:
        await rules.sync(wanted)
        assert await rules.installed() == wanted
        reply1 = lab.ask("tcp", NODE_IP, 61000)
        reply2 = lab.ask("tcp", NODE_IP, 61001)
        reply_udp = lab.ask("udp", NODE_IP, 61000)
        assert reply1 is not None
        assert reply1.startswith(f"pod1 {CLIENT_IP}:")
        assert reply2 is not None
        assert reply2.startswith(f"pod2 {CLIENT_IP}:")
        assert reply_udp is not None
        assert reply_udp.startswith(f"pod1 {CLIENT_IP}:")
        from_node = lab.ask("tcp", NODE_IP, 61001, ns=lab.node)
        assert from_node is not None
        assert from_node.startswith(f"pod2 {NODE_IP}:")
        assert lab.ask("tcp", NODE_IP, 61005) is None  # unmapped port: nothing answers
    finally:
        await rules.cleanup()
        rules.close()
    assert leftovers(lab) == []


@pytest.mark.parametrize("kind", BACKENDS)
async def test_incremental_changes_repair_and_cleanup(lab: Lab, kind: str) -> None:
    """Deltas land in the kernel; a hand-deleted rule is repaired; cleanup leaves nothing."""
    rules = backend(kind, lab.node)
    try:
        await rules.sync([to("pod1", 61000)])
        await rules.apply(add=[to("pod2", 61001), to("pod2", 61000)], remove=[])
        assert await rules.installed() == {to("pod2", 61000), to("pod2", 61001)}
        await rules.apply(add=[], remove=[to("pod2", 61001)])
        assert await rules.installed() == {to("pod2", 61000)}
        hand_delete(lab, kind, to("pod2", 61000))
        assert lab.ask("tcp", NODE_IP, 61000) is None
        assert await rules.repair(lambda: [to("pod2", 61000)]) is True
        assert await rules.repair(lambda: [to("pod2", 61000)]) is False
        reply = lab.ask("tcp", NODE_IP, 61000)
        assert reply is not None
        assert reply.startswith("pod2 ")
    finally:
        await rules.cleanup()
        rules.close()
    assert leftovers(lab) == []


@pytest.mark.parametrize("kind", BACKENDS)
async def test_node_loopback_is_not_dnated(lab: Lab, kind: str) -> None:
    """From the node, 127.0.0.1:port stays local (a service there answers); NodeIP:port DNATs."""
    lab.serve("node", "tcp", 61000, ns=lab.node)
    rules = backend(kind, lab.node)
    try:
        await rules.sync([to("pod1", 61000)])
        reply = lab.ask("tcp", "127.0.0.1", 61000, ns=lab.node)
        assert reply is not None
        assert reply.startswith("node 127.0.0.1:")
        reply = lab.ask("tcp", NODE_IP, 61000, ns=lab.node)
        assert reply is not None
        assert reply.startswith("pod1 ")
    finally:
        await rules.cleanup()
        rules.close()
    assert leftovers(lab) == []


def _echo(ns: str, port: int) -> subprocess.Popen[bytes]:
    """``podway echo`` (TCP, answers ``whoami`` with its name, ``pod1``) in ``ns``."""
    return subprocess.Popen(["ip", "netns", "exec", ns, PODWAY, "echo", "--tcp", "--address",
                             "0.0.0.0", "--port", str(port), "--name", "pod1", "--log-level",
                             "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.parametrize("kind", BACKENDS)
async def test_an_invalid_packet_to_a_node_port_gets_no_reset_from_the_node(
        lab: Lab, kind: str) -> None:
    """A packet of a DNATed flow that conntrack calls invalid (a late segment outside the
    window, a bad flag set) is not DNATed: without the table's ``input`` chain (iptables: the
    filter chain ``PODWAY-NPL-INVALID``) the node's own stack answers it with a reset, which
    can tear the load balancer's live connection to the pod down. The node sends the client
    no reset and the connection keeps working."""
    echo = _echo(lab.pods["pod1"], 9090)
    rules = backend(kind, lab.node)
    try:
        await rules.sync([to("pod1", 61010, pod_port=9090)])
        # Resets the node sends the client (the table goes with the node namespace).
        sh("nft", "-f", "-", ns=lab.node, stdin=(
            "table ip watch {\n chain out {\n type filter hook output priority 0; "
            f"policy accept;\n ip daddr {CLIENT_IP} tcp flags rst counter\n }}\n}}\n"))
        await eventually(lambda: ":9090 " in sh("ss", "-ltn", ns=lab.pods["pod1"]),
                         within=10, every=0.1)
        out = await asyncio.to_thread(sh, sys.executable, INVALID, "invalid", NODE_IP, "61010",
                                      ns=lab.client)
        assert json.loads(out) == {"before": "pod1", "after": "pod1"}, out
        resets = sh("nft", "list", "chain", "ip", "watch", "out", ns=lab.node)
        assert "counter packets 0 " in resets, resets
    finally:
        echo.kill()
        echo.wait()
        await rules.cleanup()
        rules.close()
    assert leftovers(lab) == []


@pytest.mark.skipif(shutil.which("iptables-restore") is None,
                    reason="iptables-restore is not installed")
async def test_iptables_duplicate_jumps_are_repaired_and_cleaned_up(lab: Lab) -> None:
    """A second copy of a jump (two agents overlapped) is repaired to one; cleanup leaves none."""
    rules = backend("iptables", lab.node)
    try:
        await rules.sync([to("pod1", 61000)])
        sh("iptables", "-t", "nat", "-A", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL",
           "-j", "PODWAY-NPL", ns=lab.node)
        assert await rules.installed() is None  # not exactly our hooks
        assert await rules.repair(lambda: [to("pod1", 61000)]) is True
        assert await rules.installed() == {to("pod1", 61000)}
        sh("iptables", "-t", "nat", "-A", "OUTPUT", "-m", "addrtype", "--dst-type", "LOCAL",
           "-j", "PODWAY-NPL", ns=lab.node)
    finally:
        await rules.cleanup()
        rules.close()
    assert leftovers(lab) == []


@pytest.mark.skipif(shutil.which("iptables-restore") is None,
                    reason="iptables-restore is not installed")
async def test_iptables_state_without_the_invalid_guard_is_repaired(lab: Lab) -> None:
    """An older agent's iptables state (DNAT chain and jumps, no filter chain against invalid
    packets) is drift: repair adds the guard; a delta keeps it in step; cleanup removes it."""
    rules = backend("iptables", lab.node)
    try:
        await rules.sync([to("pod1", 61000)])
        sh("iptables", "-D", "INPUT", "-m", "conntrack", "--ctstate", "INVALID", "-j",
           "PODWAY-NPL-INVALID", ns=lab.node)
        sh("iptables", "-F", "PODWAY-NPL-INVALID", ns=lab.node)
        sh("iptables", "-X", "PODWAY-NPL-INVALID", ns=lab.node)
        assert await rules.installed() is None
        assert await rules.repair(lambda: [to("pod1", 61000)]) is True
        assert await rules.installed() == {to("pod1", 61000)}
        await rules.apply(add=[to("pod2", 61001)], remove=[to("pod1", 61000)])
        assert await rules.installed() == {to("pod2", 61001)}
        guard = sh("iptables-save", "-t", "filter", ns=lab.node)
        assert "-A PODWAY-NPL-INVALID -p tcp -m tcp --dport 61001 -j DROP" in guard, guard
        assert "--dport 61000" not in guard, guard
    finally:
        await rules.cleanup()
        rules.close()
    assert leftovers(lab) == []


@pytest.mark.skipif(shutil.which("conntrack") is None, reason="conntrack is not installed")
@pytest.mark.parametrize("kind", BACKENDS)
async def test_udp_flow_follows_a_repointed_mapping(lab: Lab, kind: str) -> None:
    """A UDP client on a fixed source port reaches the new pod as soon as its mapping moves."""
    rules = backend(kind, lab.node)
    try:
        await rules.sync([to("pod1", 61000, "udp", 5353)])
        reply = lab.ask("udp", NODE_IP, 61000, sport=40000)
        assert reply is not None
        assert reply.startswith("pod1 ")
        # Same flow again: without forgetting it, conntrack would keep sending it to pod1.
        await rules.apply(add=[to("pod2", 61000, "udp", 5353)], remove=[])
        reply = lab.ask("udp", NODE_IP, 61000, sport=40000)
        assert reply is not None
        assert reply.startswith("pod2 ")
        # A full sync that moves it back forgets the flow too.
        await rules.sync([to("pod1", 61000, "udp", 5353)])
        reply = lab.ask("udp", NODE_IP, 61000, sport=40000)
        assert reply is not None
        assert reply.startswith("pod1 ")
    finally:
        await rules.cleanup()
        rules.close()
    assert leftovers(lab) == []


@pytest.mark.parametrize("kind", BACKENDS)
async def test_agent_end_to_end_restart_resync_and_cleanup(
        lab: Lab, kind: str, emu: KubeEmulator, start_agent: StartAgent) -> None:
    """The agent maps two pods, holds their ports, keeps them over a restart, repairs drift."""
    emu.put("nodes", node_obj(internal=NODE_IP))
    emu.put("services", service_obj())
    for name, ip in POD_IPS.items():
        emu.put("pods", pod_obj(name, ip=ip))
    opener = KernelSocketOpener(netns=lab.node)
    rules = backend(kind, lab.node)
    try:
        agent = await start_agent(rules=rules, opener=opener,
                                  port_range="61000-61010", resync=0.2)

        def ports() -> dict[str, int]:
            found = {}
            for name in POD_IPS:
                value = emu.annotation("default", name, ANN)
                if value:
                    found[name] = json.loads(value)[0]["nodePort"]
            return found

        await eventually(lambda: len(ports()) == 2)
        first = ports()
        for name, port in first.items():
            reply = await asyncio.to_thread(lab.ask, "tcp", NODE_IP, port)
            assert reply is not None
            assert reply.startswith(f"{name} {CLIENT_IP}:")
        # The agent holds the port: nothing else in the node can bind it.
        other = KernelSocketOpener(netns=lab.node)
        try:
            with pytest.raises(OSError, match="in use"):
                other.open(port=first["pod1"], protocol="tcp")
        finally:
            other.close()
        # Drift: a rule deleted by hand comes back with the next resync.
        hand_delete(lab, kind, to("pod1", first["pod1"]))
        await eventually(lambda: agent.metrics.drift_repairs._value.get() >= 1)
        reply = await asyncio.to_thread(lab.ask, "tcp", NODE_IP, first["pod1"])
        assert reply is not None
        assert reply.startswith("pod1 ")
        # Restart: a new agent keeps every port and traffic keeps flowing.
        await start_agent.stop(agent)
    finally:
        opener.close()
        rules.close()
    opener2 = KernelSocketOpener(netns=lab.node)
    rules2 = backend(kind, lab.node)
    try:
        again = await start_agent(rules=rules2, opener=opener2,
                                  port_range="61000-61010", resync=0.2)
        await settled(again)
        assert ports() == first
        for name, port in first.items():
            reply = await asyncio.to_thread(lab.ask, "tcp", NODE_IP, port)
            assert reply is not None
            assert reply.startswith(f"{name} ")
        await start_agent.stop(again)
    finally:
        opener2.close()
        rules2.close()
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "agent", "cleanup", "--netns", lab.node,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await cli.communicate()
    assert cli.returncode == 0, err.decode()
    family = "iptables" if kind == "iptables" else "nftables"  # nftables-cli is nftables too
    assert f"{family}: removed".encode() in out
    other = "iptables" if family == "nftables" else "nftables"
    if shutil.which(TOOLS[other]):  # the backend the agent did not use: said truthfully
        assert f"{other}: nothing installed".encode() in out
    assert leftovers(lab) == []
    again = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "agent", "cleanup", "--netns", lab.node,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await again.communicate()
    assert again.returncode == 0, err.decode()
    assert b"removed" not in out  # nothing left: never claims to have removed anything
    assert f"{family}: nothing installed".encode() in out


async def test_cli_agent_process_serves_health_metrics_and_traffic(
        lab: Lab, emu: KubeEmulator, tmp_path: Path) -> None:
    """``podway agent`` as a process (kubeconfig, metrics address) maps pods; SIGTERM stops it."""
    emu.put("nodes", node_obj(internal=NODE_IP))
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("pod1", ip=POD_IPS["pod1"]))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "emu",
        "clusters": [{"name": "emu", "cluster": {"server": emu.url}}],
        "users": [{"name": "emu", "user": {}}],
        "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu"}}]}))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        metrics_port = probe.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "agent", "--node-name", "node-a", "--kubeconfig",
        str(kubeconfig), "--port-range", "62000-62010", "--metrics-address",
        f"127.0.0.1:{metrics_port}", "--netns", lab.node,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        await eventually(lambda: emu.annotation("default", "pod1", ANN), within=15)
        value = emu.annotation("default", "pod1", ANN)
        assert value is not None
        node_port = json.loads(value)[0]["nodePort"]
        assert 62000 <= node_port <= 62010
        reply = await asyncio.to_thread(lab.ask, "tcp", NODE_IP, node_port)
        assert reply is not None
        assert reply.startswith(f"pod1 {CLIENT_IP}:")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{metrics_port}/healthz") as resp:
                assert resp.status == 200
            async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp:
                assert 'podway_npl_mappings{protocol="tcp"} 1.0' in await resp.text()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        assert proc.stderr is not None
        errors = (await proc.stderr.read()).decode()
    assert proc.returncode == 0, errors
    # Rules outlive the process (traffic survives restarts); cleanup removes them.
    reply = await asyncio.to_thread(lab.ask, "tcp", NODE_IP, node_port)
    assert reply is not None
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "agent", "cleanup", "--netns", lab.node,
        stdout=asyncio.subprocess.DEVNULL)
    assert await cli.wait() == 0
    assert leftovers(lab) == []


@pytest.mark.parametrize("kind", BACKENDS)
async def test_agent_churn_is_not_drift_but_a_hand_deletion_is(
        lab: Lab, kind: str, emu: KubeEmulator, start_agent: StartAgent) -> None:
    """Real kernel: bulk pod adds/removes under a fast resync log 0 repairs; a rule deleted by
    hand afterwards is repaired and serves again."""
    emu.put("nodes", node_obj(internal=NODE_IP))
    emu.put("services", service_obj())
    opener = KernelSocketOpener(netns=lab.node)
    rules = backend(kind, lab.node)
    try:
        agent = await start_agent(rules=rules, opener=opener, port_range="61000-61100",
                                  resync=0.05)
        for _ in range(2):
            for i in range(20):
                emu.put("pods", pod_obj(f"bulk{i}", ip=f"198.18.9.{i + 10}"))
            await eventually(lambda: len(list(agent.table)) == 20, within=30)
            await settled(agent, within=30)
            for i in range(20):
                emu.delete("pods", "default", f"bulk{i}")
            await eventually(lambda: not list(agent.table), within=30)
            await settled(agent, within=30)
        assert agent.metrics.drift_repairs._value.get() == 0
        emu.put("pods", pod_obj("pod1", ip=POD_IPS["pod1"]))
        await eventually(lambda: emu.annotation("default", "pod1", ANN))
        value = emu.annotation("default", "pod1", ANN)
        assert value is not None
        port = json.loads(value)[0]["nodePort"]
        hand_delete(lab, kind, to("pod1", port))
        await eventually(lambda: agent.metrics.drift_repairs._value.get() == 1)
        reply = await asyncio.to_thread(lab.ask, "tcp", NODE_IP, port)
        assert reply is not None
        assert reply.startswith("pod1 ")
        await start_agent.stop(agent)
    finally:
        opener.close()
        await rules.cleanup()
        rules.close()
    assert leftovers(lab) == []
