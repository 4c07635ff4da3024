"""Network-namespace test beds for VIP reachability, shared by tests/integration/vip and
bench/vip_failover.

BGP bed::

    client 198.18.50.2 ── .50.1 router .51.1 ── .51.2 engine1 (VIP 198.18.60.1 on lo, BIRD)
                          (BIRD, ECMP)  .52.1 ── .52.2 engine2 (VIP 198.18.60.1 on lo, BIRD)

VRRP bed (one L2 segment: a bridge in the "lan" namespace)::

    client 198.18.70.2   engine1 198.18.70.11 (keepalived, priority 150)
                         engine2 198.18.70.12 (keepalived, priority 100)   VIP 198.18.70.100

Each engine runs a real Envoy listening on the VIP (``--drain-strategy immediate``) in front of
``podway echo`` on 127.0.0.1:9000 (its name says which engine answered). The VIP is local on
both engines' ``lo`` (VRRP: with ``arp_ignore=1``/``arp_announce=2``, so only the VRRP owner
answers ARP for it), and both run second chance (``podway.programs.vip.secondchance``, VXLAN
between the engine hosts' addresses), installed before Envoy accepts anything. Namespace names are
random and marked ``pwvip``; only 198.18.0.0/15 is used; nothing is done in the root namespace;
``close`` removes every process, rule and namespace, also after a failure. ``kill`` simulates a
dead host (every packet dropped, then its processes killed); ``graceful_stop`` withdraws (BGP)
or hands over (VRRP) first, waits for the network to follow, then drains Envoy until no client
connection is left (the survivor hands it the packets of those connections), then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from podway.envoy.engine import admin
from podway.envoy.engine.process import find_envoy
from podway.programs.vip import keepalived
from podway.programs.vip.bird import BgpSettings, Neighbor, router_config
from podway.programs.vip.secondchance import SecondChance, SecondChanceHost
from podway.programs.vip.speaker import BirdSpeaker

LOAD = str(Path(__file__).with_name("load.py"))
BGP_VIP = "198.18.60.1"
VRRP_VIP = "198.18.70.100"
PORT = 8080
BACKEND = 9000


def unavailable(kind: str) -> str | None:
    """Why the ``kind`` ("bgp" or "vrrp") bed cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    need = ["ip", "nft"] + (["bird", "birdc"] if kind == "bgp" else ["keepalived"])
    missing = [tool for tool in need if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (Debian: bird2, keepalived, nftables)"
    try:
        find_envoy()
    except Exception as err:  # any reason is a reason to skip
        return f"no Envoy: {err}"
    probe = f"pwvip-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=False)
    if made.returncode != 0:
        return f"ip netns unusable: {made.stderr.decode().strip()}"
    try:  # second chance tunnels in VXLAN
        vxlan = subprocess.run(["ip", "netns", "exec", probe, "ip", "link", "add", "vx0", "type",
                                "vxlan", "id", "1", "dstport", "4789"],
                               capture_output=True, check=False)
        if vxlan.returncode != 0:
            return f"no VXLAN in this kernel: {vxlan.stderr.decode().strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


def envoy_bootstrap(vip: str, admin_address: str) -> dict[str, object]:
    """Envoy listening on ``vip``:PORT, proxying everything to the echo on BACKEND."""
    hcm = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
    return {
        "admin": {"address": {"pipe": {"path": admin_address.removeprefix("unix:")}}},
        "static_resources": {
            "listeners": [{
                "name": "vip",
                "address": {"socket_address": {"address": vip, "port_value": PORT}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": hcm + "HttpConnectionManager", "stat_prefix": "vip",
                        "route_config": {"virtual_hosts": [{
                            "name": "all", "domains": ["*"],
                            "routes": [{"match": {"prefix": "/"},
                                        "route": {"cluster": "echo"}}]}]},
                        "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http."
                                     "router.v3.Router"}}]}}]}]}],
            "clusters": [{
                "name": "echo", "type": "STATIC", "connect_timeout": "1s",
                "load_assignment": {"cluster_name": "echo", "endpoints": [{"lb_endpoints": [{
                    "endpoint": {"address": {"socket_address": {
                        "address": "127.0.0.1", "port_value": BACKEND}}}}]}]}}]}}


def sh(*args: str, ns: str | None = None) -> str:
    argv = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Outcome:
    """What the client saw around one event (kill or graceful stop) at ``at``."""

    requests: int
    failed: int
    recovery_s: float  # from the event to the end of the last failed request (0: none failed)
    served_by: dict[str, int] = field(default_factory=dict)
    failures: list[tuple[float, float]] = field(default_factory=list)  # (start, end) - event
    reused: int = 0  # requests sent on a connection that had served one before (keep-alive)
    # Requests sent after the last failure ended that were answered, by engine: the proof
    # that the survivor took over (whatever the machine's load made recovery cost).
    after_recovery: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Stop:
    """How a graceful stop went: seconds until the network sent nothing new here, seconds of
    drain until no client connection was left, packets the survivor handed back meanwhile."""

    follow_s: float
    drain_s: float
    handed_back: int
    left_open: int  # client connections still open when the drain limit ran out


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


class Bed:
    def __init__(self, kind: str) -> None:
        assert kind in ("bgp", "vrrp")
        self.kind = kind
        tag = uuid.uuid4().hex[:6]
        self.client = f"pwvip{tag}-client"
        self.hub = f"pwvip{tag}-{'router' if kind == 'bgp' else 'lan'}"
        self.engines = [f"pwvip{tag}-eng1", f"pwvip{tag}-eng2"]
        self.vip = BGP_VIP if kind == "bgp" else VRRP_VIP
        self.dir = Path(tempfile.mkdtemp(prefix=f"pwvip{tag}-"))
        self._made: list[str] = []
        self._procs: dict[str, list[subprocess.Popen[bytes]]] = {}
        self.speakers: dict[str, BirdSpeaker] = {}
        self.second_chance: dict[str, SecondChanceHost] = {}
        self.addresses: dict[str, str] = {}

    # --- building ------------------------------------------------------------------------------

    async def open(self) -> Bed:
        for ns in [self.client, self.hub, *self.engines]:
            sh("ip", "netns", "add", ns)
            self._made.append(ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        if self.kind == "bgp":
            await self._open_bgp()
        else:
            await self._open_vrrp()
        return self

    def _veth(self, ns: str, peer_ns: str, here: str, there: str, *,
              ips: tuple[str, str] | None) -> None:
        sh("ip", "link", "add", here, "type", "veth", "peer", "name", there, "netns", peer_ns,
           ns=ns)
        sh("ip", "link", "set", here, "up", ns=ns)
        sh("ip", "link", "set", there, "up", ns=peer_ns)
        if ips is not None:
            sh("ip", "addr", "add", ips[0], "dev", here, ns=ns)
            sh("ip", "addr", "add", ips[1], "dev", there, ns=peer_ns)

    async def _open_bgp(self) -> None:
        r = self.hub
        self._veth(r, self.client, "c0", "eth0", ips=("198.18.50.1/24", "198.18.50.2/24"))
        sh("ip", "route", "add", "default", "via", "198.18.50.1", ns=self.client)
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=r)
        # Spread connections (not only hosts) over the ECMP next hops.
        sh("sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1", ns=r)
        neighbors = []
        for i, eng in enumerate(self.engines, start=1):
            net = f"198.18.5{i}"
            self._veth(r, eng, f"e{i}", "eth0", ips=(f"{net}.1/24", f"{net}.2/24"))
            sh("ip", "route", "add", "default", "via", f"{net}.1", ns=eng)
            sh("ip", "addr", "add", f"{self.vip}/32", "dev", "lo", ns=eng)
            self.addresses[eng] = f"{net}.2"
            neighbors.append(Neighbor(address=f"{net}.2", asn=65000 + i, name=f"eng{i}"))
        await self._second_chance()
        router = BgpSettings(router_id="198.18.50.1", local_as=65000,
                             neighbors=tuple(neighbors))
        (self.dir / "router").mkdir()
        conf = self.dir / "router" / "bird.conf"
        conf.write_text(router_config(router))
        self._spawn(r, ["bird", "-f", "-c", str(conf), "-s", str(self.dir / "router" / "bird.ctl"),
                        "-P", str(self.dir / "router" / "pid")])
        for i, eng in enumerate(self.engines, start=1):
            self.serve(eng, f"eng{i}")
            settings = BgpSettings(router_id=f"198.18.5{i}.2", local_as=65000 + i,
                                   neighbors=(Neighbor(address=f"198.18.5{i}.1", asn=65000),))
            speaker = BirdSpeaker(settings, workdir=self.dir / f"eng{i}",
                                  prefix=("ip", "netns", "exec", eng))
            self.speakers[eng] = speaker
            await speaker.start([self.vip])
        await self.wait_for(lambda: self.next_hops() == 2, 20, "ECMP route with two next hops")

    async def _open_vrrp(self) -> None:
        lan = self.hub
        sh("ip", "link", "add", "br0", "type", "bridge", ns=lan)
        sh("ip", "link", "set", "br0", "up", ns=lan)
        hosts = [(self.client, "198.18.70.2"), (self.engines[0], "198.18.70.11"),
                 (self.engines[1], "198.18.70.12")]
        for i, (ns, ip) in enumerate(hosts):
            self._veth(lan, ns, f"p{i}", "eth0", ips=None)
            sh("ip", "link", "set", f"p{i}", "master", "br0", ns=lan)
            sh("ip", "addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
        for eng, (_, ip) in zip(self.engines, hosts[1:], strict=True):
            self.addresses[eng] = ip
            # The VIP stays local on lo (a stopping owner keeps serving its connections);
            # only the address keepalived puts on eth0 answers ARP.
            sh("sysctl", "-qw", "net.ipv4.conf.eth0.arp_ignore=1", ns=eng)
            sh("sysctl", "-qw", "net.ipv4.conf.eth0.arp_announce=2", ns=eng)
            sh("ip", "addr", "add", f"{self.vip}/32", "dev", "lo", ns=eng)
        await self._second_chance()
        for i, eng in enumerate(self.engines, start=1):
            sh("sysctl", "-qw", "net.ipv4.ip_nonlocal_bind=1", ns=eng)
            self.serve(eng, f"eng{i}")  # binds the VIP before keepalived gives it to anyone
            self.start_keepalived(eng, priority=150 if i == 1 else 100)
        await self.wait_for(lambda: self.vrrp_owner() == self.engines[0], 20,
                            "engine1 owning the VIP")

    async def _second_chance(self) -> None:
        """Each engine hands flows it does not know to the other (before anything serves).
        The engines filter on the reverse path strictly, a hardened host's setting."""
        for eng, peer in zip(self.engines, reversed(self.engines), strict=True):
            sh("sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1", ns=eng)
            host = SecondChanceHost(SecondChance(
                vips=(self.vip,), ports=(PORT,), local=self.addresses[eng],
                peer=self.addresses[peer]), prefix=("ip", "netns", "exec", eng))
            self.second_chance[eng] = host
            await host.install()

    def start_keepalived(self, eng: str, *, priority: int) -> None:
        work = self.dir / eng
        work.mkdir(exist_ok=True)
        conf = work / "keepalived.conf"
        conf.write_text(keepalived.config(keepalived.VrrpSettings(
            interface="eth0", router_id=70, priority=priority, advert_s=0.1), [self.vip]))
        self._spawn(eng, ["keepalived", "-n", "-D", "-f", str(conf),
                          "-p", str(work / "k.pid"), "-r", str(work / "vrrp.pid"),
                          "-c", str(work / "checkers.pid")])

    def serve(self, eng: str, name: str) -> None:
        """Envoy on the VIP in front of an echo named ``name``."""
        self.serve_backend(eng, name)
        work = self.dir / eng
        work.mkdir(exist_ok=True)
        boot = work / "envoy.json"
        boot.write_text(json.dumps(envoy_bootstrap(self.vip, self.admin(eng))))
        self._spawn(eng, [str(find_envoy()), "-c", str(boot), "--concurrency", "1",
                          "--disable-hot-restart", "--log-level", "error",
                          "--drain-time-s", "1", "--drain-strategy", "immediate"])
        self._wait_listening(eng, f"{self.vip}:{PORT}", "envoy")

    def serve_backend(self, eng: str, name: str) -> None:
        """The echo behind the engine's Envoy (``name`` says who answered)."""
        self._spawn(eng, [sys.executable, "-m", "podway", "echo", "--address", "127.0.0.1",
                          "--port", str(BACKEND), "--name", name, "--log-level", "warning"])
        self._wait_listening(eng, f"127.0.0.1:{BACKEND}", "podway echo")

    def admin(self, eng: str) -> str:
        return f"unix:{self.dir / eng / 'admin.sock'}"

    def _wait_listening(self, eng: str, where: str, what: str) -> None:
        proc = self._procs[eng][-1]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # listening (ss in the engine namespace)
            if where in sh("ss", "-ltnH", ns=eng):
                return
            if proc.poll() is not None:
                raise RuntimeError(f"{what} in {eng} exited with {proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError(f"{what} in {eng} did not listen on {where}")

    def spawn(self, ns: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Run ``argv`` in namespace ``ns``; ``close`` ends it."""
        return self._spawn(ns, argv)

    def processes(self, ns: str) -> list[subprocess.Popen[bytes]]:
        return list(self._procs.get(ns, []))

    def _spawn(self, ns: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Each process leads its own group, so its children (keepalived's VRRP process) are
        signalled with it."""
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._procs.setdefault(ns, []).append(proc)
        return proc

    # --- observing -----------------------------------------------------------------------------

    def next_hops(self) -> int:
        """Next hops of the router's kernel route to the VIP."""
        out = sh("ip", "route", "show", self.vip, ns=self.hub)
        if not out.strip():
            return 0
        return max(1, out.count("nexthop via"))

    def holds_vip(self, eng: str) -> bool:
        """VRRP: the VIP is on the engine's LAN interface (it answers ARP for it)."""
        return f"{self.vip}/32" in sh("ip", "-4", "addr", "show", "dev", "eth0", ns=eng)

    def vrrp_owner(self) -> str | None:
        """The one engine holding the VIP (None: none or several)."""
        owners = [eng for eng in self.engines if self.holds_vip(eng)]
        return owners[0] if len(owners) == 1 else None

    async def wait_for(self, check: Callable[[], bool], within: float, what: str) -> None:
        deadline = time.monotonic() + within
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {self.kind} bed never reached: {what}")
            await asyncio.sleep(0.05)

    # --- events --------------------------------------------------------------------------------

    def kill(self, eng: str) -> None:
        """The host dies: every packet in and out is dropped, then its processes are killed
        (without a goodbye: they cannot send anything any more)."""
        rules = ("add table inet dead\n"
                 "add chain inet dead in { type filter hook input priority -300; policy drop; }\n"
                 "add chain inet dead out { type filter hook output priority -300; "
                 "policy drop; }\n")
        subprocess.run(["ip", "netns", "exec", eng, "nft", "-f", "-"], input=rules.encode(),
                       check=True)
        for proc in self._procs.get(eng, []):
            _signal(proc, signal.SIGKILL)
        if eng in self.speakers:  # BIRD runs under the speaker; it cannot say goodbye either
            self.speakers[eng].kill()

    async def graceful_stop(self, eng: str, *, drain_limit: float = 15.0) -> Stop:
        """Withdraw (BGP) or hand over (VRRP), wait until the network sends nothing new here,
        drain Envoy until its last client connection closed (at most ``drain_limit`` seconds),
        stop."""
        t0 = time.monotonic()
        survivor = next(e for e in self.engines if e != eng)
        handed = await self.second_chance[survivor].forwarded()
        if self.kind == "bgp":
            await self.speakers[eng].announce([])
            await self.wait_for(lambda: self.next_hops() == 1, 10, "one next hop left")
        else:
            stopping = [p for p in self._procs[eng] if "keepalived" in p.args]  # type: ignore[operator]
            for proc in stopping:  # keepalived first: it sends priority 0 and leaves
                _signal(proc, signal.SIGTERM)
            await self.wait_for(lambda: self.holds_vip(survivor), 10, "the VIP moved")
        t1 = time.monotonic()
        # Drain: every answer now says Connection: close; keep-alive clients reconnect (to the
        # survivor); the packets of connections still open here reach us through the survivor.
        address = self.admin(eng)
        await admin.drain_listeners(address)
        deadline = time.monotonic() + drain_limit
        while True:
            left = await self.open_connections(eng)
            if left == 0 or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        t2 = time.monotonic()
        for proc in self._procs.get(eng, []):
            _signal(proc, signal.SIGTERM)
        if eng in self.speakers:
            await self.speakers[eng].stop()
        handed = await self.second_chance[survivor].forwarded() - handed
        return Stop(follow_s=t1 - t0, drain_s=t2 - t1, handed_back=handed, left_open=left)

    async def open_connections(self, eng: str) -> int:
        """Client connections Envoy on ``eng`` still holds (as ``podway engine`` counts them
        when it drains)."""
        return await admin.open_connections(self.admin(eng))

    async def measure(self, event: Callable[[], object], *, before: float = 1.5,
                      after: float = 4.0, workers: int = 4, keepalive: bool = False,
                      request_timeout: float = 0.5) -> Outcome:
        """Run the client load (one connection per request, or keep-alive connections; a
        request failed after ``request_timeout`` seconds), fire ``event`` after ``before`` seconds,
        keep going ``after`` seconds more after it returned; what the client saw."""
        load = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", self.client, sys.executable, LOAD, self.vip, str(PORT),
            str(workers), "keepalive" if keepalive else "close", str(request_timeout),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        lines: list[dict[str, object]] = []

        async def read() -> None:
            assert load.stdout is not None
            async for raw in load.stdout:
                lines.append(json.loads(raw))

        reader = asyncio.create_task(read())
        try:
            await asyncio.sleep(before)
            at = time.monotonic()
            result = event()
            if asyncio.iscoroutine(result):
                await result
            await asyncio.sleep(after)
        finally:
            assert load.stdin is not None
            load.stdin.close()
            await load.wait()
            await reader
        failed = [x for x in lines if not x["ok"]]
        served: dict[str, int] = {}
        for x in lines:
            if x["ok"]:
                served[str(x["who"])] = served.get(str(x["who"]), 0) + 1
        last = max((float(x["t1"]) for x in failed), default=at)  # type: ignore[arg-type]
        after: dict[str, int] = {}
        for x in lines:
            if x["ok"] and float(x["t0"]) > last:  # type: ignore[arg-type]
                after[str(x["who"])] = after.get(str(x["who"]), 0) + 1
        return Outcome(requests=len(lines), failed=len(failed),
                       recovery_s=max(0.0, last - at) if failed else 0.0, served_by=served,
                       failures=[(float(x["t0"]) - at, float(x["t1"]) - at)  # type: ignore[arg-type]
                                 for x in failed],
                       reused=sum(1 for x in lines if x.get("reused")),
                       after_recovery=after)

    # --- cleanup -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Everything goes; the namespaces also when a step before fails or is cancelled
        (a test's timeout, Ctrl-C), which ``suppress(Exception)`` alone would not cover."""
        try:
            for speaker in self.speakers.values():
                with contextlib.suppress(Exception):
                    await speaker.stop()
            self._reap()
            for host in self.second_chance.values():  # the namespaces go next; this checks
                with contextlib.suppress(Exception):  # that removal works on a live host too
                    await host.remove()
        finally:
            self._delete_namespaces()

    def _reap(self) -> None:
        procs = [p for ps in self._procs.values() for p in ps]
        for proc in procs:
            _signal(proc, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait(5)

    def _delete_namespaces(self) -> None:
        for ns in self._made:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
