"""Pool status counts: what following one allocation to the next costs (``PoolUsage.update``
after one Service got its VIP) against counting every pool from scratch, next to the allocation
itself (``allocate``, which the controller runs once per state anyway).

N LoadBalancer Services spread over P pools (each a /20); each round changes one grant. Times are
medians of interleaved rounds (incremental, from scratch, allocation), each also as a ratio to
the machine-speed reference (``bench/speedref.py``) and in process CPU time. No target is
asserted; the machine is shared, so compare only figures printed side by side in one run.

    python bench/pool_usage.py [--sizes 1000,10000] [--pools 50] [--tries 30]
"""

from __future__ import annotations

import argparse
import ipaddress
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import speedref

from podway.model.base import ObjectRef
from podway.programs.ipam import Claim, allocate, parse_pools
from podway.programs.ipam.usage import PoolUsage
from podway.translate.core.vips import VipGrant


def timed(fn: object) -> tuple[float, float]:
    assert callable(fn)
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def run(n: int, pools_n: int, tries: int, ref: speedref.Reference) -> None:
    base = ipaddress.ip_address("198.18.0.0")
    pools = parse_pools({"pools": [
        {"name": f"p{i}", "addresses": [f"{base + i * 4096}/20"]} for i in range(pools_n)]})
    claims = [Claim(ref=ObjectRef("Service", "ns", f"s{i}"), created=float(i), uid=f"u{i}")
              for i in range(n)]
    grants = dict(allocate(claims, pools))
    usage = PoolUsage()
    usage.update(pools, grants)
    rounds: dict[str, list[tuple[float, float]]] = {"incremental": [], "from scratch": [],
                                                    "allocate": []}
    for t in range(tries):
        ref_i = ObjectRef("Service", "ns", f"s{t % n}")
        moved = dict(grants)
        # one Service's VIP moves to an address of the last pool nobody holds
        moved[ref_i] = VipGrant(addresses=(str(base + (pools_n - 1) * 4096 + 4000 - t),))
        rounds["incremental"].append(timed(lambda g=moved: usage.update(pools, g)))
        rounds["from scratch"].append(timed(lambda g=moved: PoolUsage().update(pools, g)))
        rounds["allocate"].append(timed(lambda: allocate(claims, pools)))
        grants = moved
    for name, got in rounds.items():
        wall = statistics.median(w for w, _ in got)
        cpu = statistics.median(c for _, c in got)
        print(f"  N={n:>6} P={pools_n}: {name:<13} {wall * 1000:8.2f} ms "
              f"({ref.ratio(wall)}; {cpu * 1000:.2f} ms CPU)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--pools", type=int, default=50)
    parser.add_argument("--tries", type=int, default=30)
    args = parser.parse_args()
    ref = speedref.measure()
    print(ref.describe())
    print("(a shared machine: other engineers' work runs at the same time)")
    for size in (int(s) for s in args.sizes.split(",")):
        run(size, args.pools, args.tries, ref)
    print(ref.check_again())


if __name__ == "__main__":
    main()
