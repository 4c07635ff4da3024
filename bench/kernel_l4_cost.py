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
* ``kernel-nocount``: ``kernel-pinned`` with the per-member counter chain flushed.

    sudo .venv/bin/python bench/kernel_l4_cost.py [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernel_bed import (
    BACKENDS,
    DIRECT_URLS,
    PINNED_URLS,
    VIP,
    VIP_URLS,
    arguments,
    b1_share,
    backend_segments,
    interleaved,
    nft_table,
    session,
    sh,
    wrk,
)

B1, B2 = (far for _, far in BACKENDS.values())
CT_PROBE = """table ip podway_bench {
  chain probe { type filter hook forward priority 0; ct state established counter accept; }
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


def main() -> int:
    args = arguments(__doc__ or "")
    if args is None:
        return 2
    results: dict[str, list[tuple[float, float, float]]] = {}
    with session("podway-kernel-cost-") as (bed, _):
        for round_, mode in interleaved(MODES, args.rounds):
            with ExitStack() as stack:
                stack.enter_context(bed.engine("kernel" if mode.startswith("kernel")
                                               else "direct"))
                if mode == "direct+ct":
                    stack.enter_context(nft_table(bed, CT_PROBE, "podway_bench"))
                elif mode in FLOOR:
                    stack.enter_context(nft_table(
                        bed, _NAT.format(b1=B1, b2=B2, rules=FLOOR[mode]), "podway_bench"))
                elif mode == "kernel-nocount":
                    sh("nft", "flush", "chain", "ip", "podway_l4", "count", ns=bed.lb)
                before = backend_segments(bed)
                rps, p50, errors = wrk(bed, URLS[mode], seconds=args.seconds,
                                       connections=args.connections, close=False)
                share = b1_share(before, backend_segments(bed))
            results.setdefault(mode, []).append((rps, p50, share))
            print(f"round {round_ + 1} {mode:15} {rps:9.0f}/s p50 {p50:.3f} ms "
                  f"b1 share {share:.2f} errors {errors}", flush=True)
        direct = statistics.median(r[0] for r in results["direct"])
        print("\nmedians over rounds (long connections)")
        for mode in MODES:
            rows = results[mode]
            rps = statistics.median(r[0] for r in rows)
            print(f"{mode:15} {rps:9.0f}/s ({rps / direct:.2f}x direct)  p50 "
                  f"{statistics.median(r[1] for r in rows):.3f} ms  b1 share "
                  f"{', '.join(f'{r[2]:.2f}' for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
