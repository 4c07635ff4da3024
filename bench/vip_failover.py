"""Benchmark: VIP failover with the real speakers, in network namespaces (root; 198.18.0.0/15).

For BGP (two engine hosts announcing one VIP to a router running BIRD 2, ECMP, BFD 100 ms x 3)
and VRRP (two engine hosts on one L2 segment running keepalived, adverts every 0.1 s), with a
client sending ``--workers`` concurrent loops of one-connection HTTP requests to the VIP
(timeout 0.5 s), for each of ``--rounds`` rounds:

- kill: engine1's host dies (every packet dropped, processes killed). Figures: requests failed,
  and time from the kill to the end of the last failed request (target <= 3 s);
- graceful: engine1 withdraws (BGP: BIRD reconfigured without the VIP; VRRP: keepalived
  stopped, priority 0), the network follows, then it drains and stops. Figures: requests
  failed (target 0), and how long the network took to follow.

    sudo .venv/bin/python bench/vip_failover.py [--rounds 3] [--workers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test beds live in tests/

from tests.vip.bed import Bed, Outcome, unavailable


async def one_round(kind: str, event: str, workers: int) -> tuple[Outcome, float]:
    bed = Bed(kind)
    try:
        await bed.open()
        took: list[float] = []

        async def graceful() -> None:
            took.append(await bed.graceful_stop(bed.engines[0]))

        if event == "kill":
            outcome = await bed.measure(lambda: bed.kill(bed.engines[0]), workers=workers)
        else:
            outcome = await bed.measure(graceful, workers=workers)
        return outcome, took[0] if took else 0.0
    finally:
        await bed.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    print(f"{'reachability':<6} {'event':<9} {'requests':>9} {'failed':>7} "
          f"{'recovery s':>11} {'follow s':>9}   (median of {args.rounds} rounds; "
          f"failed: max)")
    for kind in ("bgp", "vrrp"):
        why = unavailable(kind)
        if why is not None:
            print(f"{kind:<6} skipped: {why}")
            continue
        for event in ("kill", "graceful"):
            results = [await one_round(kind, event, args.workers) for _ in range(args.rounds)]
            outcomes = [o for o, _ in results]
            follow = statistics.median(t for _, t in results) if event == "graceful" else 0.0
            print(f"{kind:<6} {event:<9} {statistics.median(o.requests for o in outcomes):>9.0f} "
                  f"{max(o.failed for o in outcomes):>7} "
                  f"{statistics.median(o.recovery_s for o in outcomes):>11.3f} "
                  f"{follow:>9.3f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
