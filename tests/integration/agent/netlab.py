"""Network namespaces for the real-kernel agent tests: a "node" with a client and two pods.

    client 198.18.0.2 ── 198.18.0.1 node 198.18.1.1 ── 198.18.1.2 pod1
                                         198.18.2.1 ── 198.18.2.2 pod2

Names are random (other test runs share this machine); only 198.18.0.0/15 is used; nothing is
done in the root namespace; ``close`` removes everything even after a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

PROBE = str(Path(__file__).with_name("netprobe.py"))
NODE_IP = "198.18.0.1"
CLIENT_IP = "198.18.0.2"
POD_IPS = {"pod1": "198.18.1.2", "pod2": "198.18.2.2"}


def netns_unavailable() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    probe = f"pwprobe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=False)
    if made.returncode != 0:
        return f"ip netns unusable: {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


def sh(*args: str, ns: str | None = None, stdin: str | None = None) -> str:
    argv = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


class Lab:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.node, self.client = f"pw{tag}-node", f"pw{tag}-client"
        self.pods = {name: f"pw{tag}-{name}" for name in POD_IPS}
        self._servers: list[subprocess.Popen[str]] = []
        self._made: list[str] = []

    @property
    def namespaces(self) -> list[str]:
        return [self.node, self.client, *self.pods.values()]

    def open(self) -> Lab:
        for ns in self.namespaces:
            sh("ip", "netns", "add", ns)
            self._made.append(ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        self._link("c0", self.client, NODE_IP, CLIENT_IP)
        for index, (name, ns) in enumerate(self.pods.items(), start=1):
            self._link(f"p{index}", ns, f"198.18.{index}.1", POD_IPS[name])
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.node)
        return self

    def _link(self, node_side: str, peer_ns: str, node_ip: str, peer_ip: str) -> None:
        sh("ip", "link", "add", node_side, "type", "veth", "peer", "name", "eth0",
           "netns", peer_ns, ns=self.node)
        sh("ip", "addr", "add", f"{node_ip}/24", "dev", node_side, ns=self.node)
        sh("ip", "link", "set", node_side, "up", ns=self.node)
        sh("ip", "addr", "add", f"{peer_ip}/24", "dev", "eth0", ns=peer_ns)
        sh("ip", "link", "set", "eth0", "up", ns=peer_ns)
        sh("ip", "route", "add", "default", "via", node_ip, ns=peer_ns)

    def serve(self, pod: str, proto: str, port: int, *, ns: str | None = None) -> None:
        """Start the echo workload named ``pod`` in its namespace (or ``ns``), wait until it
        listens."""
        proc = subprocess.Popen(["ip", "netns", "exec", ns or self.pods[pod], sys.executable,
                                 PROBE, "serve", pod, proto, str(port)],
                                stdout=subprocess.PIPE, text=True)
        self._servers.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"

    def ask(self, proto: str, host: str, port: int, *, ns: str | None = None,
            sport: int = 0) -> str | None:
        """The echo reply (``"pod1 198.18.0.2:40000"``) seen from ``ns`` (client by default);
        ``sport`` fixes the client's source port (UDP: every ask is then one flow)."""
        done = subprocess.run(["ip", "netns", "exec", ns or self.client, sys.executable, PROBE,
                               "ask", proto, host, str(port), str(sport)],
                              capture_output=True, text=True, check=False, timeout=10)
        return done.stdout.strip() if done.returncode == 0 else None

    def close(self) -> None:
        for proc in self._servers:
            proc.kill()
            proc.wait()
        for ns in self._made:
            subprocess.run(["ip", "netns", "del", ns], check=False)
