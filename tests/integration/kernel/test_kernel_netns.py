"""The kernel engine for real: ``podway run --engine kernel`` in an engine namespace, a client
namespace, two backend namespaces running ``podway echo`` (kernelbed.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from kernelbed import (
    BACKENDS,
    CLIENT,
    CLIENT_IP,
    PODWAY,
    PORT,
    VIP,
    Bed,
    endpoints,
    service,
    sh,
    unavailable,
)
from tests.golden.test_kernel_golden import SEPARATOR

from podway.ir.load import from_yaml
from podway.kernel import ruleset
from podway.kernel.plan import plan

pytestmark = pytest.mark.netns
_WHY = unavailable()
if _WHY:
    pytest.skip(_WHY, allow_module_level=True)

INTERVAL_S = 1.0  # the Services' podway.io/health-check-interval


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    made = Bed(tmp_path)
    try:
        made.open()
        for name in BACKENDS:
            made.echo(name)
        yield made
    finally:
        made.close()


def serving(bed: Bed, *members: str) -> None:
    """Wait until the table DNATs to exactly ``members``."""
    def exact() -> bool:
        table = bed.table()
        return bool(table) and all((BACKENDS[m][1] in table) == (m in members)
                                   for m in BACKENDS)
    bed.wait(exact, f"the table to serve {members}")


def checked(bed: Bed, *members: str) -> None:
    """Wait until the engine's first health check of each of ``members`` passed (its log)."""
    def said() -> str:
        return bed.engine_log.read_text() if bed.engine_log.exists() else ""
    bed.wait(lambda: all(f"member {BACKENDS[m][1]}:{PORT} of pool/default/web/80/tcp is "
                         "healthy" in said() for m in members), f"{members} checked healthy")


def test_connections_spread_over_both_members_with_snat(bed: Bed) -> None:
    """TCP and UDP new flows take the members in turn (round robin: a few connections split
    exactly, never 4/12); the members see the engine's address."""
    bed.write("web.yaml", service(udp=True) + "---\n" + endpoints("web", ["b1", "b2"], udp=True))
    bed.start_engine()
    serving(bed, "b1", "b2")
    for proto, port in (("tcp", 80), ("udp", 53)):
        # In the table is not yet healthy: a member takes new flows once its first check
        # passed (the table lists it before that; CI saw 60 of 60 on one member then).
        bed.wait(lambda p=proto, n=port: {s.get("name") for s in bed.many(10, p, n)}
                 == {"b1", "b2"}, f"both members to take new {proto} flows")
        seen = bed.many(60, proto, port)
        assert not [s for s in seen if "error" in s], seen
        # In turn: the same member twice in a row only where the table was replaced (the
        # turn restarts; a health check's change on a loaded machine), not ~30 times as
        # at random.
        order = [s["name"] for s in seen]
        repeats = sum(a == b for a, b in pairwise(order))
        assert repeats <= 2, (proto, order)
        names = Counter(order)
        assert abs(names["b1"] - names["b2"]) <= 2 * repeats + 1, (proto, names)
        # SNAT: each member sees the engine's address on its own link.
        clients = {s["name"]: s["client"].rsplit(":", 1)[0] for s in seen}
        assert clients == {name: near for name, (near, _) in BACKENDS.items()}, clients


def test_client_ip_affinity_sticks_and_transparent_keeps_the_client_address(bed: Bed) -> None:
    """sessionAffinity ClientIP: every connection of one client goes to one member; with
    podway.io/client-ip: transparent the member sees the client's own address."""
    bed.write("web.yaml", service(affinity=True,
                                  annotations={"podway.io/client-ip": "transparent"})
              + "---\n" + endpoints("web", ["b1", "b2"]))
    bed.start_engine()
    serving(bed, "b1", "b2")
    # Every table from the first on lists both members with the hash: the first checks, ending
    # one by one, no longer narrow it to one member (no jhash) and widen it back (CI failure).
    assert "jhash ip saddr" in bed.table()
    checked(bed, "b1", "b2")
    assert "jhash ip saddr" in bed.table()
    seen = bed.many(30)
    assert not [s for s in seen if "error" in s], seen
    assert len({s["name"] for s in seen}) == 1, Counter(s["name"] for s in seen)
    assert {s["client"].rsplit(":", 1)[0] for s in seen} == {CLIENT_IP}


def test_a_failed_member_leaves_new_flows_within_one_interval_and_a_second(bed: Bed) -> None:
    """Kill b1's echo: within one check interval + 1 s the table DNATs to b2 alone, and every
    new connection then succeeds on b2; b1 comes back once it answers again."""
    bed.write("web.yaml", service() + "---\n" + endpoints("web", ["b1", "b2"]))
    bed.start_engine()
    serving(bed, "b1", "b2")
    time.sleep(INTERVAL_S * 1.5)  # both checked healthy (not just panic-mode "all ready")
    killed = time.monotonic()
    bed.stop_echo("b1")
    serving(bed, "b2")
    took = time.monotonic() - killed
    assert took <= INTERVAL_S * 1.1 + 1.0, f"b1 left new flows after {took:.2f}s"
    seen = bed.many(20)
    assert [s.get("name") for s in seen] == ["b2"] * 20, seen
    bed.echo("b1")
    serving(bed, "b1", "b2")


def test_a_member_swapped_for_one_not_listening_yet_loses_no_connection(bed: Bed) -> None:
    """Every member replaced at once by one that does not listen yet (b1 → b2, b2's echo
    stopped): b1 keeps taking new flows, still checked, until b2 passes a check; then b2 alone
    does. Before, b2 took every new flow at once (the pool had no healthy member left: panic)
    and each was refused until b2 listened."""
    bed.write("web.yaml", service() + "---\n" + endpoints("web", ["b1"]))
    bed.start_engine()
    serving(bed, "b1")
    checked(bed, "b1")
    bed.stop_echo("b2")
    bed.write("web.yaml", service() + "---\n" + endpoints("web", ["b2"]))
    bed.wait(lambda: f"member {BACKENDS['b2'][1]}:{PORT} of pool/default/web/80/tcp is "
             "unhealthy" in bed.engine_log.read_text(), "b2's first check to fail")
    seen = bed.many(20)
    assert [s.get("name") for s in seen] == ["b1"] * 20, seen
    bed.echo("b2")
    serving(bed, "b2")
    seen = bed.many(20)
    assert [s.get("name") for s in seen] == ["b2"] * 20, seen


def test_a_packet_conntrack_calls_invalid_gets_no_reset_from_the_engine_host(bed: Bed) -> None:
    """A packet of a served flow that conntrack calls invalid (a late segment outside the
    window, a bad flag set) is not NATed: without the table's ``input`` chain it reaches the
    engine host's own stack, which answers a segment it has no connection for with a reset,
    and a reset whose sequence fits tears the client's live connection down. The engine host
    sends the client no reset, the table counts the drops, and the connection keeps working."""
    bed.write("web.yaml", service() + "---\n" + endpoints("web", ["b1"]))
    bed.start_engine()
    serving(bed, "b1")
    checked(bed, "b1")
    # Resets the engine host sends the client (its own health checks' resets go elsewhere).
    sh("nft", "-f", "-", ns=bed.engine, stdin=(
        "table ip watch {\n chain out {\n type filter hook output priority 0; policy accept;\n"
        f" ip daddr {CLIENT_IP} tcp flags rst counter\n }}\n}}\n"))
    out = json.loads(bed.run_client("invalid", VIP, "80"))
    assert out == {"before": "b1", "after": "b1"}, out
    resets = sh("nft", "list", "chain", "ip", "watch", "out", ns=bed.engine)
    assert re.search(r"counter packets 0 ", resets), resets
    dropped = re.findall(r"@vip_keys counter packets (\d+)", bed.table())
    assert dropped, bed.table()
    assert int(dropped[0]) >= 2, bed.table()  # the SYN+FIN ones at least


def test_a_udp_flow_leaves_a_member_that_left(bed: Bed) -> None:
    """A UDP client keeping one source port follows the member list: when its member leaves,
    its next datagram reaches the other one (conntrack entries of the old member are deleted)."""
    if shutil.which("conntrack") is None:
        pytest.skip("conntrack is not installed")
    bed.write("web.yaml", service(udp=True) + "---\n" + endpoints("web", ["b1", "b2"], udp=True))
    bed.start_engine()
    serving(bed, "b1", "b2")
    first = bed.run_client("ask", "udp", VIP, "53", "40053")
    assert first, "no answer"
    name = json.loads(first)["name"]
    other = "b2" if name == "b1" else "b1"
    assert json.loads(bed.run_client("ask", "udp", VIP, "53", "40053"))["name"] == name
    bed.write("web.yaml", service(udp=True) + "---\n" + endpoints("web", [other], udp=True))
    serving(bed, other)
    bed.wait(lambda: json.loads(bed.run_client("ask", "udp", VIP, "53", "40053") or "{}").get(
        "name") == other, f"the flow to move to {other}", limit_s=5)


def hooks(bed: Bed) -> str:
    """The table and its base chains with their kernel handles (a table made anew gets a new
    handle; chain handles count within their table)."""
    return "".join(line for line in sh("nft", "-a", "list", "table", "ip", "podway_l4",
                                       ns=bed.engine).splitlines(keepends=True)
                   if re.match(r"\s*(table|chain (prerouting|output|postrouting|count)) ", line))


def test_no_connection_fails_while_members_change(bed: Bed) -> None:
    """Members come and go (both, b1 only, b2 only, ...) every tenth of a second under a
    stream of new connections: not one fails, and the table's hooks stay the ones made first.
    (Each change replaced the whole table before: about one SYN in 500 changes then passed the
    hand-over of the NAT hooks undecided and was refused by the host.)"""
    bed.write("web.yaml", service() + "---\n" + endpoints("web", ["b1", "b2"]))
    bed.start_engine()
    serving(bed, "b1", "b2")
    first = hooks(bed)
    assert first.count("handle") == 4, first  # the table and its three NAT hooks
    loop = subprocess.Popen(["ip", "netns", "exec", bed.client, sys.executable, CLIENT, "loop",
                             VIP, "80", "8"], stdout=subprocess.PIPE, text=True)
    try:
        sets = [["b1"], ["b2"], ["b1", "b2"], ["b2"], ["b1"], ["b1", "b2"]] * 10
        for members in sets:
            bed.write("web.yaml", service() + "---\n" + endpoints("web", members))
            time.sleep(0.1)
        out, _ = loop.communicate(timeout=30)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    result = json.loads(out)
    assert result["failed"] == 0, result
    assert result["ok"] > 100, result
    assert set(result["names"]) == {"b1", "b2"}, result
    assert bed.engine_log.read_text().count("members installed") > 10
    assert hooks(bed) == first


@pytest.mark.parametrize("beside", ["envoy", "haproxy"])
def test_a_service_switches_between_envoy_and_the_kernel_without_a_failed_connection(
        bed: Bed, beside: str) -> None:
    """Beside Envoy (``podway run``) or HAProxy (``--engine haproxy``), a Service annotated
    podway.io/engine: kernel is DNATed by the kernel engine; switching the annotation off and
    on under a stream of new connections fails none (the other engine's listener waits behind
    the DNAT, conntrack keeps flows)."""
    kernel = service(annotations={"podway.io/engine": "kernel"})
    slices = endpoints("web", ["b1", "b2"])
    # First through the proxy alone, so its listener is bound before the loop starts (on a
    # loaded machine Envoy or HAProxy can take seconds to bind: that is not the switch).
    bed.write("web.yaml", service() + "---\n" + slices)
    bed.start_engine(beside)
    bed.wait(lambda: bed.ask("tcp", VIP, 80) is not None, f"{beside} to serve the VIP")
    bed.write("web.yaml", kernel + "---\n" + slices)
    serving(bed, "b1", "b2")
    loop = subprocess.Popen(["ip", "netns", "exec", bed.client, sys.executable, CLIENT, "loop",
                             VIP, "80", "9"], stdout=subprocess.PIPE, text=True)
    seen_envoy = seen_kernel = False
    try:
        for turn in range(6):
            bed.write("web.yaml", (kernel if turn % 2 else service()) + "---\n" + slices)
            time.sleep(1.2)
            in_table = BACKENDS["b1"][1] in bed.table()
            seen_kernel |= in_table
            seen_envoy |= not in_table
        out, _ = loop.communicate(timeout=30)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    assert seen_envoy
    assert seen_kernel
    result = json.loads(out)
    assert result["failed"] == 0, result
    assert result["ok"] > 100, result


def test_a_member_on_the_engines_own_node_is_reached_through_its_nodeportlocal_port(
        bed: Bed) -> None:
    """The only member is a NodePortLocal port of the engine's own node (198.18.0.1:61001, the
    agent's real rule mapping it to b1, a pod of this node). A flow is DNATed once, so a DNAT
    to the node's own port would end in the node's stack (refused); the engine DNATs to the pod
    itself, for clients and for the node itself, and checks the member through the port."""
    from podway.programs.agent.rules.nftables import full_payload
    from podway.programs.agent.types import Rule

    node, npl_port = "198.18.0.1", 61001
    sh("nft", "-f", "-", ns=bed.engine, stdin=full_payload(
        [Rule(protocol="tcp", node_port=npl_port, pod_ip=BACKENDS["b1"][1], pod_port=PORT)]))
    assert json.loads(bed.run_client("ask", "tcp", node, str(npl_port)))["name"] == "b1"
    bed.write("web.yaml", service() + "---\n" + endpoints("web", []).replace(
        f"port: {PORT}", f"port: {npl_port}").replace(
        "endpoints:\n[]", f"endpoints:\n- addresses: [{node}]\n  conditions: {{ready: true}}"))
    bed.start_engine()
    bed.wait(lambda: f"dnat to {BACKENDS['b1'][1]}:{PORT}" in bed.table(),
             "the pod behind the node's own port in the table")
    seen = bed.many(10)
    assert [s.get("name") for s in seen] == ["b1"] * 10, seen
    assert (bed.ask("tcp", VIP, 80, ns=bed.engine) or {}).get("name") == "b1"
    bed.wait(lambda: f"member {node}:{npl_port} of pool/default/web/80/tcp is healthy"
             in bed.engine_log.read_text(), "the member checked through its port")


def test_the_table_outlives_the_engine_and_cleanup_removes_it(bed: Bed) -> None:
    """Stopping the engine keeps traffic flowing (its table stays); ``podway kernel cleanup``
    removes everything, and ``podway kernel dump``/``counters`` read it before."""
    bed.write("web.yaml", service() + "---\n" + endpoints("web", ["b1"]))
    bed.start_engine()
    serving(bed, "b1")
    bed.stop_engine()
    assert bed.ask("tcp", VIP, 80) is not None
    dumped = sh(PODWAY, "kernel", "dump", ns=bed.engine)
    assert "dnat to 198.18.1.2:8080" in dumped
    counted = sh(PODWAY, "kernel", "counters", ns=bed.engine)
    connections = int(counted.split("connections=")[1].split()[0])
    assert counted.startswith("tcp 198.18.1.2:8080 "), counted
    assert connections > 0, counted
    assert "removed" in sh(PODWAY, "kernel", "cleanup", ns=bed.engine)
    assert bed.table() == ""
    assert not [t for t in sh("nft", "list", "tables", ns=bed.engine).splitlines()
                if "podway" in t]
    assert bed.ask("tcp", VIP, 80) is None  # nothing DNATs any more: the host refuses


def member_counters(bed: Bed) -> dict[str, dict[str, int]]:
    """``podway kernel counters``: member → its counters (``connections``, ``packets``, …)."""
    out = {}
    for line in sh(PODWAY, "kernel", "counters", ns=bed.engine).splitlines():
        proto, member, *fields = line.split()
        out[f"{proto} {member}"] = {k: int(v) for k, v in (f.split("=") for f in fields)}
    return out


def connections_of(bed: Bed, proto: str = "tcp") -> dict[str, int]:
    return {k.split()[1]: v["connections"] for k, v in member_counters(bed).items()
            if k.startswith(f"{proto} ")}


@pytest.mark.parametrize("flags", [(), ("--member-traffic-counters",)], ids=["default", "traffic"])
def test_each_members_connections_are_counted_and_traffic_only_when_asked(
        bed: Bed, flags: tuple[str, ...]) -> None:
    """N new TCP connections and N UDP flows through the VIP count N on their members (each
    member what its clients saw); the engine's own health checks count nothing. Packets and
    bytes per member (a lookup on every forwarded packet) only with
    --member-traffic-counters; by default the forward hook has no chain of the engine's."""
    bed.write("web.yaml", service(udp=True) + "---\n" + endpoints("web", ["b1", "b2"], udp=True))
    bed.start_engine("kernel", *flags)
    serving(bed, "b1", "b2")
    checked(bed, "b1", "b2")
    members = {name: f"{address}:{PORT}" for name, (_, address) in BACKENDS.items()}
    for proto, port in (("tcp", 80), ("udp", 53)):
        before = connections_of(bed, proto)
        # UDP flows from source ports no other call uses (below the kernel's ephemeral range):
        # a port the kernel picked again would be an earlier flow, still in conntrack.
        sport = 20000 + 100 * len(flags) if proto == "udp" else 0
        seen = Counter(s.get("name") for s in bed.many(20, proto, port, sport=sport))
        time.sleep(2 * INTERVAL_S)  # health checks meanwhile: not counted
        after = connections_of(bed, proto)
        assert sum(seen.values()) == 20, seen
        assert set(seen) <= set(members), seen
        assert {members[n]: after[members[n]] - before.get(members[n], 0) for n in members} \
            == {members[n]: seen[n] for n in members}, (proto, seen, before, after)
    table = bed.table()
    traffic = member_counters(bed)
    if flags:
        assert "hook forward" in table, table
        assert all(c["packets"] > 0 and c["bytes"] > 0 for c in traffic.values()), traffic
    else:
        assert "hook forward" not in table, table
        assert "member_counters" not in table, table
        assert not [c for c in traffic.values() if "packets" in c or "bytes" in c], traffic


def test_every_golden_ruleset_is_accepted_by_the_kernel(tmp_path: Path) -> None:
    """Each reviewed golden ruleset (tests/golden/kernel) loads, twice (a replacement), in a
    namespace of its own."""
    golden = Path(__file__).parents[2] / "golden" / "kernel"
    files = sorted(golden.glob("*/ruleset*.nft")) + sorted(golden.glob("translate/*.nft"))
    assert files
    bed = Bed(tmp_path)
    try:
        sh("ip", "netns", "add", bed.engine)
        bed._made.append(bed.engine)
        for path in files:
            for _ in range(2):
                sh("nft", "-f", str(path), ns=bed.engine)
        # The in-place changes too, each transaction on its own, in order (update.nft).
        for case, tail in ((c.parent, t) for c in sorted(golden.glob("*/update.nft"))
                           for t in ("", "-traffic")):
            services, _ = plan(from_yaml((case / "ir.yaml").read_text()), lambda p, m: True)
            sh("nft", "-f", str(case / f"ruleset{tail}.nft"), ns=bed.engine)
            for step in (case / f"update{tail}.nft").read_text().split(SEPARATOR):
                sh("nft", "-f", "-", ns=bed.engine, stdin=step)
            listed = bed.table()
            chains = set(re.findall(r"chain (\w+) \{", listed))
            # Generation 2 serves; 0 and 1 are gone; ``count`` only with traffic counters.
            base = {"prerouting", "output", "postrouting", "input"} | (
                {"count"} if tail else set())
            assert chains == base | {
                ruleset.names(i, 2)[0] for i in range(len(services))}, listed
            assert all(f"goto {ruleset.names(i, 2)[0]}" in listed
                       for i in range(len(services))), listed
            assert all(f"{b.address} . {b.port}" in listed or f"{b.address}:{b.port}" in listed
                       for s in services for b in s.backends), listed
    finally:
        bed.close()
