"""Network namespaces for the kernel engine: a client, the engine host, two backends.

    client 198.18.0.2 ── 198.18.0.1 engine 198.18.1.1 ── 198.18.1.2 b1   (podway echo)
                         VIP 198.18.0.10   198.18.2.1 ── 198.18.2.2 b2   (podway echo)

The engine runs the real command (``podway run --engine kernel``) inside its namespace; the
backends run ``podway echo --tcp --udp``. Names are random (other runs share the machine); only
198.18.0.0/15 is used; nothing is done in the root namespace; ``close`` removes every
namespace and kills every process it started (by its own handle), also after a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests import builders

CLIENT_IP = "198.18.0.2"
VIP = "198.18.0.10"
BACKENDS = {"b1": ("198.18.1.1", "198.18.1.2"), "b2": ("198.18.2.1", "198.18.2.2")}
PORT = 8080
CLIENT = str(Path(__file__).with_name("kernelclient.py"))
PODWAY = str(Path(sys.executable).with_name("podway"))


def unavailable() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def sh(*args: str, ns: str | None = None, stdin: str | None = None) -> str:
    argv = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def service(name: str = "web", *, annotations: dict[str, str] | None = None,
            affinity: bool = False, udp: bool = False) -> str:
    notes = {"podway.io/health-check-interval": "1s", "podway.io/unhealthy-threshold": "1",
             **(annotations or {})}
    ports = [builders.service_port(80, PORT, name="tcp")]
    if udp:
        ports.append(builders.service_port(53, PORT, name="udp", protocol="UDP"))
    spec = {"sessionAffinity": "ClientIP"} if affinity else {}
    return builders.manifest(builders.service(name, type_="LoadBalancer", annotations=notes,
                                              ports=ports, **spec))


def endpoints(name: str, members: list[str], *, udp: bool = False) -> str:
    ports = [f"{{name: tcp, port: {PORT}, protocol: TCP}}"]
    if udp:
        ports.append(f"{{name: udp, port: {PORT}, protocol: UDP}}")
    eps = "".join(f"- addresses: [{BACKENDS[m][1]}]\n  conditions: {{ready: true}}\n"
                  for m in members)
    return (f"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n"
            f"  name: {name}-1\n  namespace: default\n"
            f"  labels: {{kubernetes.io/service-name: {name}}}\n"
            f"addressType: IPv4\nports: [{', '.join(ports)}]\nendpoints:\n{eps or '[]'}\n")


class Bed:
    def __init__(self, root: Path) -> None:
        tag = uuid.uuid4().hex[:6]
        self.engine, self.client = f"pk{tag}-engine", f"pk{tag}-client"
        self.backends = {name: f"pk{tag}-{name}" for name in BACKENDS}
        self.root = root
        self.manifests = root / "manifests"
        self.manifests.mkdir()
        self._made: list[str] = []
        self._echo: dict[str, subprocess.Popen[bytes]] = {}
        self._engine: subprocess.Popen[bytes] | None = None
        self.engine_log = root / "engine.log"

    def open(self) -> Bed:
        for ns in (self.engine, self.client, *self.backends.values()):
            sh("ip", "netns", "add", ns)
            self._made.append(ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        self._link("c0", self.client, "198.18.0.1", CLIENT_IP)
        for index, (name, (near, far)) in enumerate(BACKENDS.items(), start=1):
            self._link(f"b{index}", self.backends[name], near, far)
        sh("ip", "addr", "add", f"{VIP}/32", "dev", "lo", ns=self.engine)
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.engine)
        return self

    def _link(self, near_side: str, peer_ns: str, near_ip: str, peer_ip: str) -> None:
        sh("ip", "link", "add", near_side, "type", "veth", "peer", "name", "eth0",
           "netns", peer_ns, ns=self.engine)
        sh("ip", "addr", "add", f"{near_ip}/24", "dev", near_side, ns=self.engine)
        sh("ip", "link", "set", near_side, "up", ns=self.engine)
        sh("ip", "addr", "add", f"{peer_ip}/24", "dev", "eth0", ns=peer_ns)
        sh("ip", "link", "set", "eth0", "up", ns=peer_ns)
        sh("ip", "route", "add", "default", "via", near_ip, ns=peer_ns)

    def echo(self, name: str) -> None:
        """Start ``podway echo`` (TCP and UDP) in backend ``name``; wait until it answers."""
        self._echo[name] = subprocess.Popen(
            ["ip", "netns", "exec", self.backends[name], PODWAY, "echo", "--tcp", "--udp",
             "--address", "0.0.0.0", "--port", str(PORT), "--name", name, "--log-level",
             "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait(lambda: self.ask("tcp", BACKENDS[name][1], PORT, ns=self.engine) is not None,
                  f"echo in {name}")

    def stop_echo(self, name: str) -> None:
        proc = self._echo.pop(name)
        proc.kill()
        proc.wait()

    def write(self, filename: str, text: str) -> None:
        """Replace a manifest atomically (the file source never sees half a file)."""
        tmp = self.manifests / f".{filename}.tmp"
        tmp.write_text(text)
        tmp.rename(self.manifests / filename)

    def start_engine(self, kind: str = "kernel", *flags: str) -> None:
        self._engine = subprocess.Popen(
            ["ip", "netns", "exec", self.engine, PODWAY, "run", "--engine", kind,
             "--manifests", str(self.manifests), "--address", VIP,
             "--state-dir", str(self.root / "state"), "--log-level", "info", *flags],
            stdout=self.engine_log.open("wb"), stderr=subprocess.STDOUT)

    def stop_engine(self) -> None:
        if self._engine is not None:
            self._engine.send_signal(signal.SIGTERM)
            try:
                self._engine.wait(10)
            except subprocess.TimeoutExpired:
                self._engine.kill()
                self._engine.wait()
            self._engine = None

    def table(self) -> str:
        try:
            return sh("nft", "list", "table", "ip", "podway_l4", ns=self.engine)
        except RuntimeError:
            return ""

    def ask(self, proto: str, host: str, port: int, *, ns: str | None = None
            ) -> dict[str, str] | None:
        """``whoami`` once: the echo's identity JSON, or None when nothing answered."""
        out = self.run_client("ask", proto, host, str(port), ns=ns)
        return json.loads(out) if out.strip() else None

    def run_client(self, *args: str, ns: str | None = None, timeout: float = 60) -> str:
        done = subprocess.run(["ip", "netns", "exec", ns or self.client, sys.executable,
                               CLIENT, *args], capture_output=True, text=True, check=False,
                              timeout=timeout)
        return done.stdout if done.returncode == 0 else ""

    def many(self, count: int, proto: str = "tcp", port: int = 80, *,
             sport: int = 0) -> list[dict[str, str]]:
        """``count`` connections (UDP: flows from source ports the kernel picks, which may
        repeat one of an earlier flow conntrack still holds) to the VIP; ``sport``: from the
        source ports ``sport``, ``sport + 1``, ... instead (new flows, if no earlier call of
        the bed used them)."""
        out = self.run_client("many", proto, VIP, str(port), str(count),
                              *([str(sport)] if sport else []))
        return [json.loads(line) for line in out.splitlines()]

    def wait(self, ok: object, what: str, *, limit_s: float = 20) -> None:
        assert callable(ok)
        end = time.monotonic() + limit_s
        while not ok():
            if time.monotonic() > end:
                log = self.engine_log.read_text() if self.engine_log.exists() else ""
                raise AssertionError(f"timed out waiting for {what}\n{log[-3000:]}")
            time.sleep(0.1)

    def close(self) -> None:
        self.stop_engine()
        for proc in self._echo.values():
            proc.kill()
            proc.wait()
        self._echo.clear()
        for ns in self._made:
            subprocess.run(["ip", "netns", "del", ns], check=False)
