"""Build and remove the lab's network with iproute2 (``ip -n NS …``): fabric, nodes, edge, client,
and one namespace per pod.

The edge carries the engine host's transparent-L4 rules (``podway.envoy.engine.transparent``): every
node routes the client range through the edge, so the pods' replies to connections the engine
opened from a client's address come back to it.

Invariants: every namespace is named ``pwlab-<lab>-…`` (``plan.LabPlan.prefix``), so ``down``
and the leftover check find all of them by prefix; nothing is configured in the root namespace
(links are made inside the namespaces and die with them); every command that fails raises
``LabError`` with the command and iproute2's message.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from podway.base.errors import EnvironmentProblem
from podway.envoy.engine import transparent
from podway.programs.agent.netns import single_thread
from podway.programs.lab.plan import (
    CLIENT_IP,
    EDGE_CLIENT_IP,
    EDGE_FABRIC_IP,
    VIP,
    LabPlan,
    NodePlan,
)

NETNS_DIR = "/run/netns"  # where iproute2 keeps named network namespaces


class LabError(EnvironmentProblem):
    """A step of building or running the lab failed; the message names the command."""


def sh(*argv: str, stdin: str | None = None, check: bool = True) -> str:
    """Run one command; its stdout, or ``LabError`` with its stderr."""
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise LabError(f"{argv[0]} is not installed (the lab needs iproute2 and nftables)"
                       ) from None
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def in_ns(ns: str, *argv: str, stdin: str | None = None) -> str:
    return sh("ip", "netns", "exec", ns, *argv, stdin=stdin)


def namespaces(prefix: str) -> list[str]:
    """Existing network namespaces whose name starts with ``prefix-``."""
    out = sh("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(f"{prefix}-"))


def add_ns(ns: str) -> None:
    sh("ip", "netns", "add", ns)
    sh("ip", "-n", ns, "link", "set", "lo", "up")


def forward(ns: str) -> None:
    in_ns(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")


def build(plan: LabPlan, *, step: Callable[[str], None] = lambda _: None) -> None:
    """Create fabric, edge, client and every node (with its pod bridge and routes)."""
    step("fabric")
    add_ns(plan.fabric)
    sh("ip", "-n", plan.fabric, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", plan.fabric, "link", "set", "br0", "up")
    step("edge and client")
    add_ns(plan.edge)
    add_ns(plan.client)
    _uplink(plan, "edge", plan.edge, f"{EDGE_FABRIC_IP}/24")
    sh("ip", "-n", plan.edge, "link", "add", "eth1", "type", "veth", "peer", "name", "eth0",
       "netns", plan.client)
    sh("ip", "-n", plan.edge, "addr", "add", f"{EDGE_CLIENT_IP}/24", "dev", "eth1")
    sh("ip", "-n", plan.edge, "link", "set", "eth1", "up")
    sh("ip", "-n", plan.edge, "addr", "add", f"{VIP}/32", "dev", "lo")
    sh("ip", "-n", plan.client, "addr", "add", f"{CLIENT_IP}/24", "dev", "eth0")
    sh("ip", "-n", plan.client, "link", "set", "eth0", "up")
    sh("ip", "-n", plan.client, "route", "add", "default", "via", EDGE_CLIENT_IP)
    forward(plan.edge)
    # Transparent L4 (podway.io/client-ip: transparent): the nodes already route the client
    # range back through the edge; these rules hand those replies to Envoy's sockets.
    nft, commands = transparent.rules()
    in_ns(plan.edge, "nft", "-f", "-", stdin=nft)
    for argv in commands:
        sh("ip", "-n", plan.edge, *argv)
    for node in plan.nodes:
        step(node.name)
        _node(plan, node)
        # clusterip mode: the edge reaches pods through static routes to each node's CIDR.
        sh("ip", "-n", plan.edge, "route", "add", node.pod_cidr, "via", node.ip)


def _uplink(plan: LabPlan, port: str, ns: str, address: str) -> None:
    sh("ip", "-n", plan.fabric, "link", "add", port, "type", "veth", "peer", "name", "eth0",
       "netns", ns)
    sh("ip", "-n", plan.fabric, "link", "set", port, "master", "br0", "up")
    sh("ip", "-n", ns, "addr", "add", address, "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")


def _node(plan: LabPlan, node: NodePlan) -> None:
    add_ns(node.netns)
    _uplink(plan, f"n{node.index}", node.netns, f"{node.ip}/24")
    sh("ip", "-n", node.netns, "link", "add", "cbr0", "type", "bridge")
    sh("ip", "-n", node.netns, "addr", "add", f"{node.gateway}/24", "dev", "cbr0")
    sh("ip", "-n", node.netns, "link", "set", "cbr0", "up")
    forward(node.netns)
    sh("ip", "-n", node.netns, "route", "add", "198.19.0.0/16", "via", EDGE_FABRIC_IP)
    for other in plan.nodes:
        if other.index != node.index:
            sh("ip", "-n", node.netns, "route", "add", other.pod_cidr, "via", other.ip)


def add_pod(plan: LabPlan, node: NodePlan, slot: int, ns: str) -> str:
    """A pod namespace on ``node``'s bridge with the address of ``slot``; its IP."""
    ip = node.pod_ip(slot)
    if Path(NETNS_DIR, ns).exists():  # left by the slot's last pod: it is gone, so is this
        remove_ns(ns)
        sh("ip", "-n", node.netns, "link", "del", f"p{slot}", check=False)
    add_ns(ns)
    port = f"p{slot}"
    sh("ip", "-n", node.netns, "link", "add", port, "type", "veth", "peer", "name", "eth0",
       "netns", ns)
    sh("ip", "-n", node.netns, "link", "set", port, "master", "cbr0", "up")
    sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")
    sh("ip", "-n", ns, "route", "add", "default", "via", node.gateway)
    return ip


def pids_in(ns: str) -> list[int]:
    out = sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def remove_ns(ns: str, *, limit_s: float = 5.0) -> None:
    """Kill what runs inside ``ns`` (it is the lab's), wait until it is gone, then delete it
    (links die with it). Deleting while a killed process still holds the namespace (an
    ``ip netns exec`` child) can leave its file behind, and the next pod given the same slot
    then fails with "File exists" (seen in back-to-back rollouts)."""
    deadline = time.monotonic() + limit_s
    while (pids := pids_in(ns)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    sh("ip", "netns", "del", ns, check=False)


def listen_in(ns: str, host: str, port: int, *, udp: bool = False) -> socket.socket:
    """A listening TCP socket (a bound UDP one with ``udp``) on ``host:port`` inside network
    namespace ``ns`` (made by a thread that joined it; the socket stays there). Non-blocking,
    for an event loop."""
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            if not udp:
                sock.listen(128)
        except OSError as exc:
            sock.close()
            raise LabError(f"cannot listen on {host}:{port} in {ns}: {exc}") from None
        sock.setblocking(False)
        return sock

    pool = single_thread(netns=ns, name="lab-listen")
    try:
        return pool.submit(make).result()
    finally:
        pool.shutdown()
