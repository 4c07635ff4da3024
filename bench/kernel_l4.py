"""L4 through no load balancer, the kernel engine and Envoy's TCP proxy, side by side.

    client 198.18.0.2 ── 198.18.0.1 lb 198.18.1.1 ── 198.18.1.2 b1  (nginx, 1 worker)
                          VIP 198.18.0.10  198.18.2.1 ── 198.18.2.2 b2  (nginx, 1 worker)

Modes, interleaved round by round (the machine is shared: only figures of one run compare):

* ``direct``: no load balancer — the client asks b1 and b2 themselves, half of the connections
  each (the lb namespace only routes);
* ``kernel``: ``podway run --engine kernel`` in the lb namespace (nftables DNAT, SNAT);
* ``envoy``: ``podway run`` (Envoy's TCP proxy, one worker) in the lb namespace.

Each mode is measured with wrk in the client namespace (HTTP/1.1 to nginx: the bytes are
opaque to both load balancers): ``long`` keeps ``--connections`` connections open (rps, p50);
``new`` closes each connection after its one request (connections per second). CPU: the whole
machine's busy time per connection (/proc/stat; includes wrk and nginx, and whatever else runs
on the machine — compare modes, not absolute values), and the engine process's own CPU per
connection (Envoy; the kernel engine's process only runs health checks, its DNAT is softirq
time, counted in the machine's figure).

PAWS-refused SYNs: the kernel engine SNATs to the lb's own address, the one Envoy's
connections to the same backends came from. A backend keeps the TIME_WAIT of each connection it
closed (60 s) with that connection's TCP timestamp; a SNATed SYN on the same 4-tuple carries the
client's timestamp, which may be older, and is refused (PAWS): the client retries after 1 s.
So a ``kernel new`` right after an ``envoy`` round shows collapsed connections per second
(docs/kernel.md, "SNAT and TIME_WAIT"); rounds where kernel runs first show its real figure.

    sudo .venv/bin/python bench/kernel_l4.py [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from speedref import Reference, measure

VIP = "198.18.0.10"
BACKENDS = {"b1": ("198.18.1.1", "198.18.1.2"), "b2": ("198.18.2.1", "198.18.2.2")}
PODWAY = str(Path(sys.executable).with_name("podway"))
NGINX = """daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d};
  fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
  server {{ listen 8080 reuseport backlog=4096; location / {{ return 200 "ok\\n"; }} }} }}
"""
MANIFEST = """apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  type: LoadBalancer
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
{eps}
"""


def sh(*args: str, ns: str | None = None) -> str:
    argv = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def paws_rejects(bed: Bed) -> int:
    """SYNs the backends refused for an older timestamp on a TIME_WAIT tuple (see main)."""
    total = 0
    for ns in bed.backends.values():
        out = sh("nstat", "-az", "TcpExtPAWSTimewait", ns=ns)
        total += sum(int(line.split()[1]) for line in out.splitlines() if "PAWS" in line)
    return total


def busy_jiffies() -> int:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    out = [pid]
    for line in subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        child, parent = (int(x) for x in line.split())
        if parent == pid:
            out += children(child)
    return out


class Bed:
    def __init__(self, root: Path) -> None:
        tag = uuid.uuid4().hex[:6]
        self.lb, self.client = f"pkb{tag}-lb", f"pkb{tag}-client"
        self.backends = {n: f"pkb{tag}-{n}" for n in BACKENDS}
        self.root = root
        self.made: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def open(self) -> None:
        for ns in (self.lb, self.client, *self.backends.values()):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        self._link("c0", self.client, "198.18.0.1", "198.18.0.2")
        for i, (name, (near, far)) in enumerate(BACKENDS.items(), start=1):
            self._link(f"b{i}", self.backends[name], near, far)
            folder = self.root / name
            folder.mkdir()
            (folder / "nginx.conf").write_text(NGINX.format(d=folder))
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", self.backends[name], "nginx", "-c",
                 str(folder / "nginx.conf")], stderr=subprocess.DEVNULL))
        sh("ip", "addr", "add", f"{VIP}/32", "dev", "lo", ns=self.lb)
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.lb)
        for ns in self.made:  # many short connections: reuse TIME_WAIT ports on the client
            sh("sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1", ns=ns)
        (self.root / "manifests").mkdir()
        eps = "".join(f"- addresses: [{far}]\n  conditions: {{ready: true}}\n"
                      for _, far in BACKENDS.values())
        (self.root / "manifests" / "web.yaml").write_text(MANIFEST.format(eps=eps))
        time.sleep(0.5)

    def _link(self, near_side: str, peer: str, near_ip: str, peer_ip: str) -> None:
        sh("ip", "link", "add", near_side, "type", "veth", "peer", "name", "eth0", "netns", peer,
           ns=self.lb)
        sh("ip", "addr", "add", f"{near_ip}/24", "dev", near_side, ns=self.lb)
        sh("ip", "link", "set", near_side, "up", ns=self.lb)
        sh("ip", "addr", "add", f"{peer_ip}/24", "dev", "eth0", ns=peer)
        sh("ip", "link", "set", "eth0", "up", ns=peer)
        sh("ip", "route", "add", "default", "via", near_ip, ns=peer)

    @contextmanager
    def engine(self, kind: str) -> Iterator[int | None]:
        """The load balancer of ``kind`` running; yields its process id (None: direct)."""
        if kind == "direct":
            yield None
            return
        argv = ["ip", "netns", "exec", self.lb, PODWAY, "run", "--manifests",
                str(self.root / "manifests"), "--address", VIP, "--engine", kind,
                "--state-dir", str(self.root / f"state-{kind}"), "--log-level", "warning"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            end = time.monotonic() + 30
            while not self._answers():
                if time.monotonic() > end or proc.poll() is not None:
                    raise RuntimeError(f"{kind} engine did not start serving")
                time.sleep(0.2)
            yield proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            subprocess.run(["ip", "netns", "exec", self.lb, PODWAY, "kernel", "cleanup"],
                           capture_output=True, check=False)

    def _answers(self) -> bool:
        done = subprocess.run(["ip", "netns", "exec", self.client, "wrk", "-t1", "-c1", "-d1s",
                               f"http://{VIP}/"], capture_output=True, text=True, check=False)
        return done.returncode == 0 and "Requests/sec" in done.stdout \
            and "Non-2xx" not in done.stdout and "Socket errors" not in done.stdout

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], check=False)


def wrk(bed: Bed, urls: list[str], *, seconds: float, connections: int, close: bool
        ) -> tuple[float, float, int]:
    """(requests/s, p50 ms, socket errors) of wrk runs in the client namespace, one per URL at
    the same time (``connections`` shared between them): summed rps, mean p50, summed errors."""
    procs = []
    for url in urls:
        argv = ["ip", "netns", "exec", bed.client, "wrk", "-t1",
                f"-c{max(1, connections // len(urls))}", f"-d{seconds:g}s", "--latency", url]
        if close:
            argv[-1:-1] = ["-H", "Connection: close"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    outs = [proc.communicate()[0] for proc in procs]
    rps = p50s = 0.0
    errors = 0
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    for out in outs:
        found = re.search(r"Requests/sec:\s+([\d.]+)", out)
        p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
        if found is None or p50 is None:
            raise RuntimeError(f"wrk said:\n{out}")
        rps += float(found.group(1))
        p50s += float(p50.group(1)) * scale[p50.group(2)]
        errors += sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
        errors += sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    return rps, p50s / len(outs), errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("wrk") or not shutil.which("nginx"):
        print("needs root, wrk and nginx", file=sys.stderr)
        return 2
    # SIGTERM (timeout, kill) ends the run through the finally blocks: namespaces and nginx go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ref: Reference = measure()
    print(ref.describe())
    print("The machine is shared with other work: compare the modes of this run only.")
    modes = ("direct", "kernel", "envoy")
    results: dict[tuple[str, str], list[tuple[float, float, float, float, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="podway-kernel-bench-") as tmp:
        bed = Bed(Path(tmp))
        try:
            bed.open()
            for round_ in range(args.rounds):
                for mode in modes[round_ % 3:] + modes[:round_ % 3]:  # rotate the order
                    with bed.engine(mode) as pid:
                        # Two wrk processes in every mode (the same client CPU): to b1 and b2
                        # directly, or both to the VIP.
                        urls = [f"http://{far}:8080/" for _, far in BACKENDS.values()] \
                            if mode == "direct" else [f"http://{VIP}/"] * 2
                        for kind, close in (("long", False), ("new", True)):
                            pids = children(pid) if pid else []
                            cpu0 = sum(proc_cpu_s(p) for p in pids)
                            paws0 = paws_rejects(bed)
                            busy0, t0 = busy_jiffies(), time.monotonic()
                            rps, p50, errors = wrk(bed, urls, seconds=args.seconds,
                                                      connections=args.connections,
                                                      close=close)
                            wall = time.monotonic() - t0
                            busy = (busy_jiffies() - busy0) / os.sysconf("SC_CLK_TCK")
                            engine_cpu = sum(proc_cpu_s(p) for p in pids) - cpu0
                            total = rps * wall
                            paws = paws_rejects(bed) - paws0
                            results.setdefault((mode, kind), []).append(
                                (rps, p50, busy / total * 1e6, engine_cpu / total * 1e6,
                                 errors))
                            print(f"round {round_ + 1} {mode:6} {kind:4} {rps:9.0f}/s "
                                  f"p50 {p50:.3f} ms  machine {busy / total * 1e6:6.1f} us/"
                                  f"{'conn' if close else 'req'}  engine process "
                                  f"{engine_cpu / total * 1e6:6.1f} us  errors {errors}  "
                                  f"PAWS-refused SYNs {paws}",
                                  flush=True)
        finally:
            bed.close()
    print("\nmedians over rounds (us per request or connection: CPU time)")
    base = {k: statistics.median(r[2] for r in results[("direct", k)]) for k in ("long", "new")}
    for kind in ("long", "new"):
        direct = statistics.median(r[0] for r in results[("direct", kind)])
        for mode in modes:
            rows = results[(mode, kind)]
            rps = statistics.median(r[0] for r in rows)
            machine = statistics.median(r[2] for r in rows)
            print(f"{kind:4} {mode:6} {rps:9.0f}/s ({rps / direct:.2f}x direct)  p50 "
                  f"{statistics.median(r[1] for r in rows):.3f} ms  machine CPU "
                  f"{machine:6.1f} us (+{machine - base[kind]:.1f} over direct)  engine process "
                  f"{statistics.median(r[3] for r in rows):6.1f} us  errors "
                  f"{sum(r[4] for r in rows)}")
    print(ref.check_again())
    return 0


if __name__ == "__main__":
    sys.exit(main())
