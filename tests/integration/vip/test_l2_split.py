"""L2 mode with three hosts in network namespaces, a real client and its neighbour cache::

    client 198.18.91.2 ─┐
    eng1 198.18.91.11   ├─ bridge (namespace "lan")      VIPs 198.18.91.100-..., one owner each
    eng2 198.18.91.12   │
    eng3 198.18.91.13  ─┘

- **A split with --quorum**: eng3's heartbeats are dropped both ways (nftables in its
  namespace) while the client still reaches it. The minority (eng3, hearing none of its two
  peers) lets go of its VIP; the majority (eng1 and eng2, hearing each other: 2 of 3) takes it
  over, and the client — whose neighbour cache pointed at eng3 — is answered by the new owner,
  and ARP for the VIP gets one answer. Healed, eng3 takes its VIP back and each VIP has one
  owner again. Without --quorum (the control, MetalLB's way) the same split leaves eng3
  holding its VIP while the majority holds it too: the split is real, and --quorum is what
  makes the minority let go.
- **ARP isolation**: every host keeps the VIP local on ``lo`` (as second chance or kube-proxy
  in IPVS mode do); the speakers set ``arp_ignore=1``/``arp_announce=2`` on ``e0`` and only
  the owner answers ARP for the VIP; with ``--no-arp-isolation`` every host answers (the
  control); on exit the speaker puts the sysctls back.

Namespace names are random and marked ``pwl2s``; only 198.18.0.0/15 is used; everything is
removed afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from podway.programs.vip.l2 import owner
from tests.integration.vip.test_l2 import LOAD, PODWAY, sh, unavailable
from tests.waiting import eventually

pytestmark = pytest.mark.netns

ENGINES = {"eng1": "198.18.91.11", "eng2": "198.18.91.12", "eng3": "198.18.91.13"}
CLIENT = "198.18.91.2"
PORT = 7946
# One VIP each host owns when all three are candidates, eng3's first.
VIPS = {name: next(v for v in (f"198.18.91.{i}" for i in range(100, 200))
                   if owner(v, list(ENGINES)) == name) for name in ("eng3", "eng1", "eng2")}

# Send one ARP request for argv[2] out of argv[1] and print the distinct sender MACs of the
# replies heard within a second (a JSON list).
PROBE = r"""
import json, socket, struct, sys, time
dev, target = sys.argv[1], socket.inet_aton(sys.argv[2])
mine = bytes.fromhex(open(f"/sys/class/net/{dev}/address").read().strip().replace(":", ""))
me = socket.inet_aton(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
s.bind((dev, 0))
s.send(b"\xff" * 6 + mine + b"\x08\x06" + struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1,
                                                      mine, me, b"\x00" * 6, target))
s.settimeout(0.1)
seen, end = set(), time.monotonic() + 1.0
while time.monotonic() < end:
    try:
        frame = s.recv(2048)
    except TimeoutError:
        continue
    op, sha, spa = struct.unpack("!H6s4s", frame[20:32])
    if op == 2 and spa == target:
        seen.add(sha.hex(":"))
print(json.dumps(sorted(seen)))
"""


class SplitBed:
    def __init__(self, folder: Path) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ns = {name: f"pwl2s{tag}-{name}" for name in ("lan", "client", *ENGINES)}
        self.dir = folder
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {}
        self.key = folder / "l2.key"
        self.key.write_bytes(os.urandom(32))

    def open(self) -> None:
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
        lan = self.ns["lan"]
        sh("ip", "link", "add", "br0", "type", "bridge", ns=lan)
        sh("ip", "link", "set", "br0", "up", ns=lan)
        for name, address in (("client", CLIENT), *ENGINES.items()):
            ns = self.ns[name]
            sh("ip", "link", "add", f"p-{name}", "type", "veth", "peer", "name", "e0",
               "netns", ns, ns=lan)
            sh("ip", "link", "set", f"p-{name}", "master", "br0", "up", ns=lan)
            sh("ip", "addr", "add", f"{address}/24", "dev", "e0", ns=ns)
            sh("ip", "link", "set", "e0", "up", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)

    def echo(self, name: str) -> None:
        self.spawn(name, [*PODWAY, "echo", "--address", "0.0.0.0", "--port", "8080",
                          "--name", name])

    def speaker(self, name: str, vips: list[str], *extra: str) -> subprocess.Popen[bytes]:
        peers = [f"--peer={n}={a}:{PORT}" for n, a in ENGINES.items() if n != name]
        return self.spawn(name, [*PODWAY, "vip", "l2", "--node", name, "--interface", "e0",
                                 "--listen", f"{ENGINES[name]}:{PORT}", *peers,
                                 *(f"--vip={v}" for v in vips), "--key-file", str(self.key),
                                 "--hand-over-wait", "1", *extra])

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{name}-{len(self.procs.get(name, []))}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns[name], *argv], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.setdefault(name, []).append(proc)
        return proc

    def holders(self, vip: str) -> list[str]:
        return [n for n in ENGINES if f"{vip}/32" in sh("ip", "-4", "addr", "show", "dev", "e0",
                                                        ns=self.ns[n])]

    def settled(self) -> bool:
        """Each VIP on exactly the host the hash gives it among all three."""
        return all(self.holders(v) == [n] for n, v in VIPS.items())

    def ask(self, vip: str) -> str:
        out = sh("curl", "-s", "-m", "1", f"http://{vip}:8080/", ns=self.ns["client"],
                 check=False)
        try:
            return str(json.loads(out)["name"])
        except (ValueError, KeyError):
            return ""

    def load(self, vip: str) -> tuple[subprocess.Popen[str], Path]:
        """Two loops of new-connection requests to ``vip`` from the client (1 s timeout each),
        written to a file until stdin closes."""
        out = self.dir / "load.jsonl"
        with out.open("w") as sink:
            proc = subprocess.Popen(["ip", "netns", "exec", self.ns["client"], sys.executable,
                                     LOAD, vip, "8080", "2", "close", "1"],
                                    stdin=subprocess.PIPE, stdout=sink, text=True,
                                    start_new_session=True)
        return proc, out

    def arp_answers(self, vip: str) -> list[str]:
        out = sh(sys.executable, "-c", PROBE, "e0", vip, CLIENT, ns=self.ns["client"])
        return list(json.loads(out))

    def mac(self, name: str) -> str:
        return sh("cat", "/sys/class/net/e0/address", ns=self.ns[name]).strip()

    def cut_heartbeats(self, name: str, cut: bool) -> None:
        """Drop (or let through again) every heartbeat to and from ``name``."""
        if not cut:
            sh("nft", "delete", "table", "inet", "pwsplit", ns=self.ns[name])
            return
        rules = (f"table inet pwsplit {{ chain i {{ type filter hook input priority 0; "
                 f"udp dport {PORT} drop; }}; chain o {{ type filter hook output priority 0; "
                 f"udp dport {PORT} drop; }}; }}")
        sh("nft", rules, ns=self.ns[name])

    def close(self) -> None:
        for procs in self.procs.values():
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        for ns in self.ns.values():
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[SplitBed]:
    why = unavailable()
    if why is None and shutil.which("nft") is None:
        why = "not installed: nft"
    if why is not None:
        pytest.skip(why)
    made = SplitBed(tmp_path)
    try:
        made.open()
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("quorum", [True, False], ids=["quorum", "control"])
async def test_a_split_off_minority_lets_go_and_the_majority_keeps_answering(
        bed: SplitBed, quorum: bool) -> None:
    vip = VIPS["eng3"]
    for name in ENGINES:
        bed.echo(name)
        bed.speaker(name, list(VIPS.values()), *(["--quorum"] if quorum else []))
    await eventually(bed.settled, within=20)
    await eventually(lambda: bed.ask(vip) == "eng3", within=10)  # the client's cache: eng3
    bed.cut_heartbeats("eng3", True)
    if not quorum:  # MetalLB's way: both sides of the split take the VIP
        await eventually(lambda: len(bed.holders(vip)) == 2, within=10)
        assert "eng3" in bed.holders(vip)
        return
    await eventually(lambda: bed.holders(vip) not in ([], ["eng3"]), within=10)
    await eventually(lambda: "eng3" not in bed.holders(vip), within=10)
    new = bed.holders(vip)
    assert len(new) == 1
    assert new[0] == owner(vip, ["eng1", "eng2"])
    await eventually(lambda: bed.ask(vip) == new[0], within=10)
    assert bed.mac(new[0]) in sh("ip", "neigh", "show", vip, ns=bed.ns["client"])
    assert bed.arp_answers(vip) == [bed.mac(new[0])]
    # eng3 holds nothing at all; the majority's own VIPs stayed where they were
    assert [v for v in VIPS.values() if "eng3" in bed.holders(v)] == []
    assert bed.holders(VIPS["eng1"]) == ["eng1"]
    assert bed.holders(VIPS["eng2"]) == ["eng2"]
    bed.cut_heartbeats("eng3", False)  # healed: eng3 takes its own VIP back, one owner each
    await eventually(bed.settled, within=15)
    await eventually(lambda: bed.ask(vip) == "eng3", within=10)
    assert bed.mac("eng3") in sh("ip", "neigh", "show", vip, ns=bed.ns["client"])
    assert bed.arp_answers(vip) == [bed.mac("eng3")]


def sysctls(bed: SplitBed, name: str) -> tuple[str, str]:
    out = sh("sysctl", "-n", "net.ipv4.conf.e0.arp_ignore", "net.ipv4.conf.e0.arp_announce",
             ns=bed.ns[name]).split()
    return out[0], out[1]


@pytest.mark.parametrize("isolation", [True, False], ids=["isolated", "control"])
async def test_only_the_owner_answers_arp_when_every_host_keeps_the_vip_local(
        bed: SplitBed, isolation: bool) -> None:
    vip = VIPS["eng3"]
    before = {sysctls(bed, n) for n in ENGINES}
    assert before != {("1", "2")}  # else the test could not tell
    for name in ENGINES:
        sh("ip", "addr", "add", f"{vip}/32", "dev", "lo", ns=bed.ns[name])
        bed.speaker(name, [vip], *([] if isolation else ["--no-arp-isolation"]))
    await eventually(lambda: bed.holders(vip) == ["eng3"], within=20)
    if isolation:  # every speaker has started (under load one may start seconds after eng3)
        await eventually(lambda: {sysctls(bed, n) for n in ENGINES} == {("1", "2")}, within=20)
    answers = bed.arp_answers(vip)
    if not isolation:  # the kernel answers for a local address on any interface
        assert sorted(answers) == sorted(bed.mac(n) for n in ENGINES)
        assert {sysctls(bed, n) for n in ENGINES} == before
        return
    assert answers == [bed.mac("eng3")]
    for procs in bed.procs.values():
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
    for procs in bed.procs.values():
        for proc in procs:
            assert proc.wait(timeout=15) == 0
    assert {sysctls(bed, n) for n in ENGINES} == before  # put back on exit


async def test_an_engine_that_stops_being_ready_hands_its_vip_over_without_a_failed_request(
        bed: SplitBed) -> None:
    """eng3's health URL stops answering (its engine no longer ready, as when its pod is being
    deleted: the engine itself still serves, draining): eng3 keeps the VIP until the new
    owner's heartbeat says it holds it, so a steady loop of new connections to the VIP loses
    none; the VIP ends on the hash's owner among eng1 and eng2."""
    vip = VIPS["eng3"]
    health = {}
    for name in ENGINES:
        bed.echo(name)
        health[name] = bed.spawn(name, [*PODWAY, "echo", "--address", "127.0.0.1", "--port",
                                        "8099", "--name", name])
        bed.speaker(name, [vip], "--health-url", "http://127.0.0.1:8099/")
    await eventually(lambda: bed.holders(vip) == ["eng3"], within=20)
    await eventually(lambda: bed.ask(vip) == "eng3", within=10)
    load, out = bed.load(vip)
    try:
        await asyncio.sleep(1.0)
        os.killpg(health["eng3"].pid, signal.SIGKILL)
        new = owner(vip, ["eng1", "eng2"])
        await eventually(lambda: bed.holders(vip) == [new], within=10)
        await asyncio.sleep(1.0)
    finally:
        load.communicate("", timeout=30)
    results = [json.loads(line) for line in out.read_text().splitlines()
               if line.startswith("{")]
    failed = [r for r in results if not r["ok"]]
    print(f"\nL2 unready engine: {len(results)} requests, {len(failed)} failed, answered by "
          f"{sorted({r['who'] for r in results if r['ok']})}")
    assert results
    assert failed == []
    assert {r["who"] for r in results if r["ok"]} == {"eng3", new}
