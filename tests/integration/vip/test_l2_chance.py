"""L2 second chance in network namespaces: a connection straddling the client's cache move::

    client  ─┐
    eng1     ├─ bridge (namespace "lan")      the VIP on both engines (a hand-over in progress)
    eng2    ─┘

The straddle is forced, not waited for: the client's neighbour entry for the VIP is pinned on
eng1's MAC (the old owner) while it connects, then flipped to eng2's (the new owner, as its
unsolicited announcement does) before it sends its request. Without second chance eng2's stack
knows no such connection and answers RST; with it (``podway.programs.vip.l2_chance`` in eng2's
namespace, pointing at eng1) the request reaches eng1's socket and eng1 answers. A new
connection after the flip is served by eng2 (SYNs are always served by the new owner). IPv4
(198.18.91.0/24) and IPv6 (link-local only, VIP ``fe80::100``); namespace names are random and
marked ``pwl2c``; everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.vip.test_l2 import PODWAY, sh, unavailable
from tests.waiting import eventually

pytestmark = pytest.mark.netns

ADDRESSES = {4: {"vip": "198.18.91.100", "client": "198.18.91.2", "eng1": "198.18.91.11",
                 "eng2": "198.18.91.12"},
             6: {"vip": "fe80::100", "client": "fe80::2", "eng1": "fe80::11",
                 "eng2": "fe80::12"}}

# Inside the client's namespace: connect, say so, wait for a line, then send one request on
# that connection and print who answered (or the error).
CLIENT = textwrap.dedent("""
    import json, re, socket, sys
    host, family = sys.argv[1], socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
    where = (host, 8080, 0, socket.if_nametoindex("e0")) if ":" in host else (host, 8080)
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(where)
    print("connected", flush=True)
    sys.stdin.readline()
    try:
        s.sendall(b"GET / HTTP/1.1\\r\\nHost: vip\\r\\nConnection: close\\r\\n\\r\\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        found = re.search(rb'"name": ?"([^"]+)"', data)
        print(json.dumps({"who": found.group(1).decode() if found else data[:80].decode()}))
    except OSError as err:
        print(json.dumps({"error": type(err).__name__}))
""")

HANDBACK = textwrap.dedent("""
    import asyncio, sys
    from podway.programs.vip.l2_chance import HandBack, L2Chance
    chance = L2Chance()
    if sys.argv[1] == "take":
        asyncio.run(chance.take(HandBack(sys.argv[2], sys.argv[3], "e0", "eng1"), 0.0))
        sys.exit(1 if chance.failed else 0)
    if sys.argv[1] == "count":
        print(asyncio.run(chance.passed()).get(sys.argv[2], 0))
        sys.exit(0)
    asyncio.run(chance.clear())
""")


@dataclass
class ChanceBed:
    folder: Path
    version: int

    def __post_init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ns = {n: f"pwl2c{tag}-{n}" for n in ("lan", "client", "eng1", "eng2")}
        self.at = ADDRESSES[self.version]
        self.procs: list[subprocess.Popen[bytes]] = []

    def open(self) -> None:
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
        lan = self.ns["lan"]
        sh("ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", ns=lan)
        sh("ip", "link", "set", "br0", "up", ns=lan)
        prefix = 24 if self.version == 4 else 64
        for name in ("client", "eng1", "eng2"):
            ns = self.ns[name]
            sh("ip", "link", "add", f"p-{name}", "type", "veth", "peer", "name", "e0",
               "netns", ns, ns=lan)
            sh("ip", "link", "set", f"p-{name}", "master", "br0", "up", ns=lan)
            sh("sysctl", "-qw", "net.ipv6.conf.e0.accept_dad=0", ns=ns)
            sh("ip", "addr", "add", f"{self.at[name]}/{prefix}", "dev", "e0", ns=ns)
            sh("ip", "link", "set", "e0", "up", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        for name in ("eng1", "eng2"):  # both hold the VIP: the old owner has not let go yet
            vip = f"{self.at['vip']}/{32 if self.version == 4 else 128}"
            sh("ip", "addr", "add", vip, "dev", "e0", *(("nodad",) if self.version == 6 else ()),
               ns=self.ns[name])
            log = open(self.folder / f"{name}-echo.log", "wb")  # noqa: SIM115
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", self.ns[name], *PODWAY, "echo", "--address",
                 "0.0.0.0" if self.version == 4 else "::", "--port", "8080", "--name", name],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
        for ns in self.ns.values():
            sh("ip", "netns", "del", ns, check=False)

    def mac(self, name: str) -> str:
        return sh("cat", "/sys/class/net/e0/address", ns=self.ns[name]).strip()

    def pin(self, name: str) -> None:
        """The client's neighbour entry for the VIP: ``name``'s MAC, permanent."""
        sh("ip", "neigh", "replace", self.at["vip"], "lladdr", self.mac(name), "dev", "e0",
           "nud", "permanent", ns=self.ns["client"])

    def connect(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns["client"], sys.executable,
                                 "-c", CLIENT, self.at["vip"]], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "connected"
        return proc

    def request(self, proc: subprocess.Popen[str]) -> dict[str, str]:
        out, _ = proc.communicate("go\n", timeout=20)
        return dict(json.loads(out.strip().splitlines()[-1]))

    def handback(self, *args: str) -> str:
        return subprocess.run(["ip", "netns", "exec", self.ns["eng2"], sys.executable, "-c",
                               HANDBACK, *args], check=True, timeout=30, capture_output=True,
                              text=True).stdout

    def tables(self) -> str:
        return sh("nft", "list", "tables", ns=self.ns["eng2"])

    def serving(self) -> bool:
        try:
            self.pin("eng1")
            return "who" in self.request(self.connect())
        except (AssertionError, ValueError, subprocess.TimeoutExpired):
            return False


@pytest.fixture(params=[4, 6], ids=["ipv4", "ipv6-link-local"])
def bed(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ChanceBed]:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    made = ChanceBed(tmp_path, request.param)
    try:
        made.open()
        yield made
    finally:
        made.close()


async def test_a_connection_straddling_the_cache_move_is_answered_by_the_old_owner(
        bed: ChanceBed) -> None:
    await eventually(bed.serving, within=20)
    bed.handback("take", bed.at["vip"], bed.at["eng1"])
    assert "podway_l2_chance" in bed.tables()
    bed.pin("eng1")
    straddling = bed.connect()  # SYN and handshake with the old owner
    bed.pin("eng2")  # the new owner's announcement moved the client's cache
    assert bed.request(straddling) == {"who": "eng1"}
    assert int(bed.handback("count", bed.at["vip"])) >= 2  # the request and the client's FIN
    assert bed.request(bed.connect()) == {"who": "eng2"}  # a SYN: served by the new owner
    bed.handback("clear")
    assert "podway_l2_chance" not in bed.tables()


async def test_without_second_chance_the_straddling_connection_is_reset(bed: ChanceBed) -> None:
    """The control: the bed really forces the straddle (the new owner resets it)."""
    await eventually(bed.serving, within=20)
    bed.pin("eng1")
    straddling = bed.connect()
    bed.pin("eng2")
    assert bed.request(straddling) == {"error": "ConnectionResetError"}
