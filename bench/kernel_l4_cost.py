"""Where the kernel engine's long-connection cost goes: the spread, conntrack, NAT, the counters.

Interleaved rounds in the namespaces of ``bench/kernel_bed.py``; long connections only (wrk
keep-alive, 16 connections over two wrk processes). Each row also prints ``b1 share``: the part
of the round's TCP segments backend b1 received (0.50 is the even split ``direct`` has by
construction). Both backends are single-worker nginx on a shared 2-core machine, so a mode
that gives one backend more than half the connections is bounded by that backend, whatever the
load balancer costs: compare modes of equal share.

Modes:

* ``direct``: no load balancer, one wrk process per backend (the lb namespace only routes);
* ``direct+ct``: the same with one ``ct state`` rule in the lb's forward hook (every flow
  tracked): what connection tracking alone costs;
* ``nft-dnat``: the floor, no Podway: one plain ``dnat to`` rule per VIP port (81 → b1,
  82 → b2) and a masquerade rule; one wrk process per port, so the split is exact;
* ``nft-numgen`` / ``nft-jhash``: one rule spreading port 80 over both backends through a map
  keyed by ``numgen random`` / ``jhash ip saddr . tcp sport``, and masquerade (no Podway);
* ``kernel``: ``podway run --engine kernel``, both wrk processes to port 80 (``web``, two
  members, random per flow);
* ``kernel-pinned``: the engine, one wrk process per one-member Service (ports 81, 82): the
  engine's per-packet path with the exact split of ``direct``;
* ``kernel-nocount``: ``kernel-pinned`` without its per-member connection counter (the first
  rule of ``postrouting``; the per-packet counters are off by default, see
  ``--member-traffic-counters`` and ``bench/kernel_l4_paired.py --variants``).

    sudo .venv/bin/python bench/kernel_l4_cost.py [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import functools
import re
import signal
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernel_bed import (
    BACKENDS,
    DIRECT_URLS,
    PINNED_URLS,
    VIP,
    VIP_URLS,
    Bed,
    arguments,
    b1_share,
    backend_segments,
    connections_now,
    interleaved,
    nft_table,
    session,
    sh,
    wrk,
)

B1, B2 = (far for _, far in BACKENDS.values())
# Conntrack on for the namespace, no rule on the forwarded path: a ct rule turns conntrack on
# at every hook whichever chain holds it, and forwarded packets never enter ``output``.
CT_PROBE = """table ip podway_bench {
  chain probe { type filter hook output priority 0; ct state established counter accept; }
}
"""
_NAT = """table ip podway_bench {{
  map members {{ typeof numgen random mod 1 : ip daddr . tcp dport;
                 elements = {{ 0 : {b1} . 8080, 1 : {b2} . 8080 }} }}
  chain pre {{ type nat hook prerouting priority dstnat; policy accept;
{rules}
  }}
  chain post {{ type nat hook postrouting priority srcnat; policy accept;
    ct status dnat masquerade; }}
}}
"""
FLOOR = {
    "nft-dnat": f"    ip daddr {VIP} tcp dport 81 dnat to {B1}:8080\n"
                f"    ip daddr {VIP} tcp dport 82 dnat to {B2}:8080",
    "nft-numgen": f"    ip daddr {VIP} tcp dport 80 dnat ip to numgen random mod 2 map @members",
    "nft-jhash": f"    ip daddr {VIP} tcp dport 80 dnat ip to jhash ip saddr . tcp sport mod 2 "
                 "map @members",
}
MODES = ("direct", "direct+ct", "nft-dnat", "nft-numgen", "nft-jhash", "kernel", "kernel-pinned",
         "kernel-nocount")
URLS = {"direct": DIRECT_URLS, "direct+ct": DIRECT_URLS, "nft-dnat": PINNED_URLS,
        "nft-numgen": VIP_URLS, "nft-jhash": VIP_URLS, "kernel": VIP_URLS,
        "kernel-pinned": PINNED_URLS, "kernel-nocount": PINNED_URLS}


NETFILTER = re.compile(r"^(nf_|nft_|__nf_|ipv4_conntrack|nf_nat|masquerade|hash_conntrack|"
                       r"__nft|ct_|ctnetlink|nf_ct_|nat_|inet_proto_csum)")
PERIOD_US = 100  # perf: one sample per 100 us of CPU (cpu-clock, fixed period)


class Profile:
    """``perf record`` of the round's wrk and nginx processes (the softirq work of the lb's
    forwarding runs in their context on veth): CPU per request, and the part in netfilter."""

    def __init__(self, bed: Bed, folder: Path) -> None:
        self.bed, self.folder = bed, folder
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, pids: list[int]) -> None:
        targets = [*pids, *(proc.pid for proc in self.bed.procs)]
        self.proc = subprocess.Popen(
            ["perf", "record", "-q", "-e", "cpu-clock", "-c", str(PERIOD_US * 1000), "-p",
             ",".join(map(str, targets)), "-o", str(self.folder / "perf.data")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self, requests: float) -> tuple[float, float]:
        """(CPU us per request of wrk + nginx, of which in netfilter symbols)."""
        if self.proc is None:
            return float("nan"), float("nan")
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)
        out = subprocess.run(["perf", "report", "-i", str(self.folder / "perf.data"), "--stdio",
                              "-q", "--sort", "sym", "-F", "sample,sym"],
                             capture_output=True, text=True, check=False).stdout
        total = netfilter = 0
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 3 or not parts[0].isdigit():
                continue
            samples, symbol = int(parts[0]), parts[-1]
            total += samples
            if NETFILTER.match(symbol):
                netfilter += samples
        scale = PERIOD_US / requests if requests else float("nan")
        return total * scale, netfilter * scale


def _split(into: dict[str, int], bed: Bed) -> None:
    into.update(connections_now(bed))


def main() -> int:
    parser_args = arguments(__doc__ or "", extra=(("--perf", "profile wrk and nginx with perf "
                                                    "(CPU per request and the netfilter part)"),))
    if parser_args is None:
        return 2
    args = parser_args
    Row = tuple[float, float, float, str, float, float]  # rps, p50, b1 share, conns, cpu, nf
    results: dict[str, list[Row]] = {}
    ratios: dict[str, list[float]] = {}
    with session("podway-kernel-cost-") as (bed, _):
        direct_now: float | None = None
        for round_, mode in interleaved(MODES, args.rounds):
            split: dict[str, int] = {}
            profile = Profile(bed, bed.root) if args.perf else None
            with ExitStack() as stack:
                stack.enter_context(bed.engine("kernel" if mode.startswith("kernel")
                                               else "direct"))
                if mode == "direct+ct":
                    stack.enter_context(nft_table(bed, CT_PROBE, "podway_bench"))
                elif mode in FLOOR:
                    stack.enter_context(nft_table(
                        bed, _NAT.format(b1=B1, b2=B2, rules=FLOOR[mode]), "podway_bench"))
                elif mode == "kernel-nocount":
                    sh("nft", "flush", "chain", "ip", "podway_l4", "postrouting", ns=bed.lb)
                    sh("nft", "add", "rule", "ip", "podway_l4", "postrouting", "meta", "mark",
                       "and", "0x00400000", "==", "0x00400000", "masquerade", ns=bed.lb)
                before = backend_segments(bed)
                t0 = time.monotonic()
                rps, p50, errors = wrk(bed, URLS[mode], seconds=args.seconds,
                                       connections=args.connections, close=False,
                                       started=profile.start if profile else None,
                                       midway=functools.partial(_split, split, bed))
                cpu, nf = profile.stop(rps * (time.monotonic() - t0)) if profile \
                    else (float("nan"), float("nan"))
                share = b1_share(before, backend_segments(bed))
            conns = f"{split.get('b1', 0)}/{split.get('b2', 0)}"
            results.setdefault(mode, []).append((rps, p50, share, conns, cpu, nf))
            if mode == "direct":
                direct_now = rps
            elif direct_now:  # paired with the nearest direct round before it
                ratios.setdefault(mode, []).append(rps / direct_now)
            print(f"round {round_ + 1} {mode:15} {rps:9.0f}/s p50 {p50:.3f} ms "
                  f"b1 share {share:.2f} conns b1/b2 {conns} errors {errors}"
                  + (f"  wrk+nginx CPU {cpu:5.1f} us/req, netfilter {nf:4.1f}" if profile
                     else ""), flush=True)
        direct = statistics.median(r[0] for r in results["direct"])
        print("\nmedians over rounds (long connections); 'paired': the median of each round's "
              "rate over the direct round just before it")
        for mode in MODES:
            rows = results[mode]
            rps = statistics.median(r[0] for r in rows)
            paired = statistics.median(ratios[mode]) if ratios.get(mode) else 1.0
            print(f"{mode:15} {rps:9.0f}/s ({rps / direct:.2f}x direct, paired {paired:.2f}x)  "
                  f"p50 {statistics.median(r[1] for r in rows):.3f} ms  conns b1/b2 "
                  f"{' '.join(r[3] for r in rows)}"
                  + (f"  CPU {statistics.median(r[4] for r in rows):5.1f} us/req, netfilter "
                     f"{statistics.median(r[5] for r in rows):4.1f}" if args.perf else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
