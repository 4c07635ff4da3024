"""Benchmark: VIP failover with the real speakers, in network namespaces (root; 198.18.0.0/15).

For BGP (two engine hosts announcing one VIP to a router running BIRD 2, ECMP, BFD 100 ms x 3)
and VRRP (two engine hosts on one L2 segment running keepalived, adverts every 0.1 s), each
engine a real Envoy on the VIP with second chance installed (``podway.programs.vip.secondchance``),
with a client sending ``--workers`` concurrent loops of HTTP requests to the VIP (timeout 0.5 s) —
one connection per request, then keep-alive connections (twice the loops, so that ECMP puts some
on each engine) — for each of ``--rounds`` rounds:

- kill: engine1's host dies (every packet dropped, processes killed). Figures: requests failed,
  and time from the kill to the end of the last failed request (target <= 3 s);
- graceful: engine1 withdraws (BGP: BIRD reconfigured without the VIP; VRRP: keepalived
  stopped, priority 0), the network follows, Envoy drains until its last client connection is
  gone, then it stops. Figures: requests failed (target 0), how long the network took to
  follow, how long the drain took, packets the survivor handed back to engine1.

    sudo .venv/bin/python bench/vip_failover.py [--rounds 3] [--workers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test beds live in tests/

from tests.integration.vip.bed import Bed, Outcome, Stop, unavailable


async def one_round(kind: str, event: str, workers: int, keepalive: bool
                    ) -> tuple[Outcome, Stop | None]:
    bed = Bed(kind)
    try:
        await bed.open()
        stops: list[Stop] = []

        async def graceful() -> None:
            stops.append(await bed.graceful_stop(bed.engines[0]))

        if event == "kill":
            outcome = await bed.measure(lambda: bed.kill(bed.engines[0]), workers=workers,
                                        keepalive=keepalive)
        else:
            outcome = await bed.measure(graceful, workers=workers, keepalive=keepalive)
        return outcome, stops[0] if stops else None
    finally:
        await bed.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    print(f"{'mode':<5} {'event':<9} {'client':<11} {'requests':>9} {'failed':>7} "
          f"{'recovery s':>11} {'follow s':>9} {'drain s':>8} {'handed':>7}   "
          f"(median of {args.rounds} rounds; failed: max)")
    for kind in ("bgp", "vrrp"):
        why = unavailable(kind)
        if why is not None:
            print(f"{kind:<5} skipped: {why}")
            continue
        for event in ("kill", "graceful"):
            for keepalive in (False, True):
                workers = args.workers * (2 if keepalive else 1)
                results = [await one_round(kind, event, workers, keepalive)
                           for _ in range(args.rounds)]
                outcomes = [o for o, _ in results]
                stops = [s for _, s in results if s is not None]

                def med(values: list[float]) -> str:
                    return f"{statistics.median(values):.3f}" if values else "-"

                client = "keep-alive" if keepalive else "per-request"
                print(f"{kind:<5} {event:<9} {client:<11} "
                      f"{statistics.median(o.requests for o in outcomes):>9.0f} "
                      f"{max(o.failed for o in outcomes):>7} "
                      f"{med([o.recovery_s for o in outcomes]):>11} "
                      f"{med([s.follow_s for s in stops]):>9} "
                      f"{med([s.drain_s for s in stops]):>8} "
                      f"{med([float(s.handed_back) for s in stops]):>7}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
