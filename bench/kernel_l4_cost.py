"""Where the kernel engine's long-connection cost goes: conntrack, NAT, the counters, or the
measuring setup. Interleaved rounds in the namespaces of ``bench/kernel_l4.py``; long
connections only (wrk keep-alive, 16 connections over two wrk processes).

Modes:

* ``direct``: no load balancer, each wrk process to one backend (kernel_l4's baseline; the lb
  namespace only routes, conntrack is never used there);
* ``direct+ct``: the same, with one rule in the lb namespace's forward hook that makes the kernel
  track every flow (``ct state established accept``): what connection tracking alone costs;
* ``kernel``: ``podway run --engine kernel`` (DNAT to the VIP's members, SNAT, per-member
  counters in the forward hook), both wrk processes to the VIP;
* ``kernel-nocount``: the same with the counter chain emptied (``nft flush chain``): what the
  per-member counters cost per packet;
* ``kernel-1``: the kernel engine with one wrk process holding all 16 connections to the VIP
  (not two): whether the client side's split (two wrk processes, members picked at random per
  connection, so one backend may get more than half) is part of the gap.

    sudo .venv/bin/python bench/kernel_l4_cost.py [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernel_l4 import BACKENDS, VIP, Bed, sh, wrk
from speedref import Reference, measure

CT_PROBE = """table ip podway_bench_ct {
  chain probe { type filter hook forward priority 0; ct state established counter accept; }
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("wrk") or not shutil.which("nginx"):
        print("needs root, wrk and nginx", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ref: Reference = measure()
    print(ref.describe())
    print("The machine is shared with other work: compare the modes of this run only.")
    modes = ("direct", "direct+ct", "kernel", "kernel-nocount", "kernel-1")
    results: dict[str, list[tuple[float, float]]] = {}
    direct_urls = [f"http://{far}:8080/" for _, far in BACKENDS.values()]
    with tempfile.TemporaryDirectory(prefix="podway-kernel-cost-") as tmp:
        bed = Bed(Path(tmp))
        try:
            bed.open()
            for round_ in range(args.rounds):
                order = modes[round_ % len(modes):] + modes[:round_ % len(modes)]
                for mode in order:
                    engine = "kernel" if mode.startswith("kernel") else "direct"
                    with bed.engine(engine):
                        urls = direct_urls if engine == "direct" else [f"http://{VIP}/"] * 2
                        if mode == "kernel-1":
                            urls = [f"http://{VIP}/"]
                        if mode == "direct+ct":
                            subprocess.run(["ip", "netns", "exec", bed.lb, "nft", "-f", "-"],
                                           input=CT_PROBE, text=True, check=True)
                        if mode == "kernel-nocount":
                            sh("nft", "flush", "chain", "ip", "podway_l4", "count", ns=bed.lb)
                        try:
                            rps, p50, errors = wrk(bed, urls, seconds=args.seconds,
                                                   connections=args.connections, close=False)
                        finally:
                            if mode == "direct+ct":
                                subprocess.run(["ip", "netns", "exec", bed.lb, "nft", "delete",
                                                "table", "ip", "podway_bench_ct"], check=False)
                        results.setdefault(mode, []).append((rps, p50))
                        print(f"round {round_ + 1} {mode:15} {rps:9.0f}/s p50 {p50:.3f} ms "
                              f"errors {errors}", flush=True)
        finally:
            bed.close()
    direct = statistics.median(r[0] for r in results["direct"])
    print("\nmedians over rounds (long connections)")
    for mode in modes:
        rps = statistics.median(r[0] for r in results[mode])
        p50 = statistics.median(r[1] for r in results[mode])
        print(f"{mode:15} {rps:9.0f}/s ({rps / direct:.2f}x direct)  p50 {p50:.3f} ms")
    print(ref.check_again())
    return 0


if __name__ == "__main__":
    sys.exit(main())
