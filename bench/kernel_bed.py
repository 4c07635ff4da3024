"""The network-namespace bed shared by ``bench/kernel_l4.py`` and ``bench/kernel_l4_cost.py``.

    client 198.18.0.2 ── 198.18.0.1 lb 198.18.1.1 ── 198.18.1.2 b1  (nginx, 1 worker)
                          VIP 198.18.0.10  198.18.2.1 ── 198.18.2.2 b2  (nginx, 1 worker)

Manifests: ``web`` (port 80, both backends as members) and ``web-b1``/``web-b2`` (ports 81/82,
one member each: an exact half of the connections per backend through the engine, the same
split the ``direct`` baseline has). ``run`` drives the modes a script names, interleaved round
by round in rotating order, with the machine-speed reference around them (the machine is
shared: only figures of one run compare). Per-backend load is read from each backend
namespace's received TCP segments (``nstat TcpInSegs``), so a mode's spread is printed beside
its rate.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
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
  server {{ listen 8080 reuseport backlog=4096; location / {{ return 200 "{body}\\n"; }} }} }}
"""
SERVICE = """apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  type: LoadBalancer
  selector: {{app: {name}}}
  ports: [{{name: http, port: {port}, targetPort: 8080, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: default, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
{eps}---
"""
# (service, VIP port, members): ``web`` spreads over both; web-b1/web-b2 pin one each.
SERVICES = (("web", 80, ("b1", "b2")), ("web-b1", 81, ("b1",)), ("web-b2", 82, ("b2",)))
DIRECT_URLS = [f"http://{far}:8080/" for _, far in BACKENDS.values()]
VIP_URLS = [f"http://{VIP}/"] * 2  # both wrk processes to ``web`` (random member per flow)
PINNED_URLS = [f"http://{VIP}:81/", f"http://{VIP}:82/"]  # one wrk process per backend


def manifests() -> str:
    out = []
    for name, port, members in SERVICES:
        eps = "".join(f"- addresses: [{BACKENDS[m][1]}]\n  conditions: {{ready: true}}\n"
                      for m in members)
        out.append(SERVICE.format(name=name, port=port, eps=eps))
    return "".join(out)


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


def forget_time_wait(bed: Bed) -> int:
    """End the backends' TIME_WAIT sockets (``ss -K``): a round then starts as on a fresh
    host, without the previous mode's 4-tuples waiting to refuse its SYNs (see
    ``paws_rejects``). Returns how many there were."""
    ended = 0
    for ns in bed.backends.values():
        out = sh("ss", "-K", "-Htn", "state", "time-wait", ns=ns)
        ended += len(out.splitlines())
    return ended


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
    def __init__(self, root: Path, body_bytes: int = 3) -> None:
        tag = uuid.uuid4().hex[:6]
        self.body = "ok" if body_bytes <= 3 else "x" * (body_bytes - 1)  # + the newline
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
            (folder / "nginx.conf").write_text(NGINX.format(d=folder, body=self.body))
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", self.backends[name], "nginx", "-c",
                 str(folder / "nginx.conf")], stderr=subprocess.DEVNULL))
        sh("ip", "addr", "add", f"{VIP}/32", "dev", "lo", ns=self.lb)
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.lb)
        for ns in self.made:  # many short connections: reuse TIME_WAIT ports on the client
            sh("sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1", ns=ns)
        (self.root / "manifests").mkdir()
        (self.root / "manifests" / "web.yaml").write_text(manifests())
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
    def engine(self, kind: str, flags: tuple[str, ...] = ()) -> Iterator[int | None]:
        """The load balancer of ``kind`` running (``flags``: more ``podway run`` flags);
        yields its process id (None: direct)."""
        if kind == "direct":
            yield None
            return
        argv = ["ip", "netns", "exec", self.lb, PODWAY, "run", "--manifests",
                str(self.root / "manifests"), "--address", VIP, "--engine", kind,
                "--state-dir", str(self.root / f"state-{kind}"), "--log-level", "warning",
                *flags]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            end = time.monotonic() + 90  # a loaded machine starts Podway slowly
            while not self._answers() or not self._spreads(kind):
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

    def _spreads(self, kind: str) -> bool:
        """The kernel engine's table spreads ``web`` over both members: each passed its first
        check (before that the table lists fewer, and a round's connections, opened at once,
        would pile on one member: 1/14 was seen)."""
        if kind != "kernel":
            return True

        def table() -> str:
            return subprocess.run(["ip", "netns", "exec", self.lb, "nft", "list", "table", "ip",
                                   "podway_l4"], capture_output=True, text=True,
                                  check=False).stdout

        first = table()
        time.sleep(1.0)  # the first checks run within a tenth of the interval: settled then
        return first == table() and all(f"{far} . 8080" in first for _, far in BACKENDS.values())

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


def wrk(bed: Bed, urls: list[str], *, seconds: float, connections: int, close: bool,
        started: Callable[[list[int]], None] | None = None,
        midway: Callable[[], None] | None = None,
        done: list[int] | None = None) -> tuple[float, float, int]:
    """(requests/s, p50 ms, socket errors) of wrk runs in the client namespace, one per URL at
    the same time (``connections`` shared between them): summed rps, mean p50, summed errors.
    ``started`` gets the wrk processes' ids once they run; ``midway`` is called half-way;
    ``done`` gets the number of requests the wrk processes completed (their sum)."""
    procs = []
    for url in urls:
        argv = ["ip", "netns", "exec", bed.client, "wrk", "-t1",
                f"-c{max(1, connections // len(urls))}", f"-d{seconds:g}s", "--latency", url]
        if close:
            argv[-1:-1] = ["-H", "Connection: close"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    if started is not None:
        started([proc.pid for proc in procs])  # ``ip netns exec`` execs wrk: the same process
    if midway is not None:
        time.sleep(seconds / 2)
        midway()
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
    if done is not None:
        done.append(sum(int(n) for out in outs for n in re.findall(r"(\d+) requests in", out)))
    return rps, p50s / len(outs), errors




def backend_segments(bed: Bed) -> dict[str, int]:
    """TCP segments each backend namespace has received so far (its share of the load)."""
    out = {}
    for name, ns in bed.backends.items():
        text = sh("nstat", "-az", "TcpInSegs", ns=ns)
        out[name] = sum(int(line.split()[1]) for line in text.splitlines() if "TcpInSegs" in line)
    return out


def connections_now(bed: Bed) -> dict[str, int]:
    """Established connections each backend's nginx holds now (the split of the clients')."""
    out = {}
    for name, ns in bed.backends.items():
        text = sh("ss", "-Htn", "state", "established", "( sport = :8080 )", ns=ns)
        out[name] = len(text.splitlines())
    return out


def b1_share(before: dict[str, int], after: dict[str, int]) -> float:
    """The part of the segments of a round that b1 received (0.5: an even split)."""
    got = {name: after[name] - before[name] for name in after}
    total = sum(got.values())
    return got["b1"] / total if total else float("nan")


@contextmanager
def nft_table(bed: Bed, text: str, table: str) -> Iterator[None]:
    """``text`` (one nftables table named ``table``) loaded in the lb namespace, removed after."""
    subprocess.run(["ip", "netns", "exec", bed.lb, "nft", "-f", "-"], input=text, text=True,
                   check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "netns", "exec", bed.lb, "nft", "delete", "table", "ip", table],
                       check=False)


def arguments(doc: str, extra: tuple[tuple[str, str], ...] = ()) -> argparse.Namespace | None:
    """The scripts' shared options (``extra``: flags of one script, as (flag, help)); None
    (after saying why) when the machine cannot run them."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--body-bytes", type=int, default=3,
                        help="the backends' answer body (default 3: \"ok\\n\", the cheapest "
                        "path, where the load balancer's share of each request is largest)")
    parser.add_argument("--modes", default="",
                        help="kernel_l4_paired/profile: comma-separated modes to run "
                        "(default: the script's own)")
    for flag, help_ in extra:
        parser.add_argument(flag, action="store_true", help=help_)
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("wrk") or not shutil.which("nginx"):
        print("needs root, wrk and nginx", file=sys.stderr)
        return None
    return args


@contextmanager
def session(prefix: str, body_bytes: int = 3) -> Iterator[tuple[Bed, Reference]]:
    """The bed opened (and closed, also on SIGTERM) with the machine-speed reference taken;
    the backends answer ``body_bytes`` of body (``--body-bytes``)."""
    # SIGTERM (timeout, kill) ends the run through the finally blocks: namespaces and nginx go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ref: Reference = measure()
    print(ref.describe())
    print("The machine is shared with other work: compare the modes of this run only.")
    print(f"backends answer {body_bytes} bytes of body")
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        bed = Bed(Path(tmp), body_bytes)
        try:
            bed.open()
            yield bed, ref
        finally:
            bed.close()
    print(ref.check_again())


def interleaved(modes: tuple[str, ...], rounds: int) -> Iterator[tuple[int, str]]:
    """(round, mode) for every round, the order rotated each round."""
    for round_ in range(rounds):
        shift = round_ % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            yield round_, mode
