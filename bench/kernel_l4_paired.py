"""Kernel engine vs no load balancer, in measures the machine's load does not move much.

The machine is shared (2 cores, other work on them): a round's requests per second follow
the CPU share the round happens to get, and moved 2-5x between rounds. So besides the rates,
each round gives the CPU the whole path spent per request: user + system time of wrk and both
nginx backends from /proc (without IRQ time accounting, softirq work, where the forwarding, the
DNAT and conntrack run, is charged to the task it interrupted: mostly these), plus the kernel
engine process's own time (its health checks). The rate the path would reach on the same CPU
is then ``1 / CPU per request``: comparing that between modes is the load-robust form of
"rps vs no load balancer". ksoftirqd's time (softirq work deferred under load, shared with the
machine's other work) is printed beside it, not added.

``--perf`` samples wrk and nginx with perf (cpu-clock, as ``bench/kernel_l4_cost.py``): the
part of their CPU in netfilter symbols, per request, is the kernel engine's own work (conntrack,
NAT, its rules; zero for ``direct``). This VM has no hardware counters (``perf stat -e
instructions`` says not supported), so instructions per request cannot be had here.

Rounds are short and paired: ``direct`` then ``kernel`` (the order alternating), and each
pair gives ratios; medians over pairs are printed. ``--pin``: wrk on CPU 0, both nginx on
CPU 1 (taskset), so the modes see the same placement. The bed is ``bench/kernel_bed.py``
(long connections: 16 keep-alive over two wrk processes, one member each through the engine's
one-member Services, the exact split ``direct`` has; new connections: ``Connection: close``).

    sudo .venv/bin/python bench/kernel_l4_paired.py [--rounds 8] [--seconds 4] [--pin]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernel_bed import (
    DIRECT_URLS,
    PINNED_URLS,
    Bed,
    arguments,
    children,
    proc_cpu_s,
    session,
    wrk,
)
from kernel_l4_cost import Profile

Row = dict[str, float]


def ksoftirqd() -> list[int]:
    out = subprocess.run(["pgrep", "-x", "ksoftirqd/[0-9]+"], capture_output=True, text=True,
                         check=False).stdout
    return [int(p) for p in out.split()]


def children_cpu_s() -> float:
    """User + system time of this process's reaped children (wrk, once its round ended)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def one_round(bed: Bed, mode: str, close: bool, args: argparse.Namespace,
              engine: int | None) -> Row:
    nginx = [p.pid for p in bed.procs]
    engine_pids = children(engine) if engine else []
    soft = ksoftirqd()
    before = {p: proc_cpu_s(p) for p in [*nginx, *engine_pids, *soft]}

    def pin(pids: list[int]) -> None:
        for pid in pids:
            subprocess.run(["taskset", "-p", "-c", "0", str(pid)], capture_output=True,
                           check=False)

    profile = Profile(bed, bed.root) if args.perf else None

    def started(pids: list[int]) -> None:
        if args.pin:
            pin(pids)
        if profile is not None:
            profile.start(pids)

    urls = DIRECT_URLS if mode == "direct" else PINNED_URLS
    reaped = children_cpu_s()  # only the round's wrk processes are reaped in between
    rps, p50, errors = wrk(bed, urls, seconds=args.seconds, connections=args.connections,
                           close=close, started=started)
    _, netfilter = profile.stop(rps * args.seconds) if profile else (0.0, float("nan"))
    path = children_cpu_s() - reaped + sum(proc_cpu_s(p) - before[p] for p in nginx)
    eng = sum(proc_cpu_s(p) - before[p] for p in engine_pids)
    softirqd = sum(proc_cpu_s(p) - before[p] for p in soft)
    requests = rps * args.seconds
    return {"rps": rps, "p50": p50, "errors": errors,
            "path_us": (path + eng) / requests * 1e6, "engine_us": eng / requests * 1e6,
            "ksoftirqd_us": softirqd / requests * 1e6, "nf_us": netfilter}


def main() -> int:
    args = arguments(__doc__ or "", extra=(
        ("--pin", "wrk on CPU 0, nginx on CPU 1"),
        ("--perf", "perf cpu-clock samples of wrk and nginx: the netfilter part per request")))
    if args is None:
        return 2
    rows: dict[tuple[str, str], list[Row]] = {}
    ratios: dict[str, dict[str, list[float]]] = {"long": {}, "new": {}}
    with session("podway-kernel-paired-") as (bed, ref):
        if args.pin:
            for proc in bed.procs:
                subprocess.run(["taskset", "-a", "-p", "-c", "1", str(proc.pid)],
                               capture_output=True, check=False)
        print(f"load average at the start {os.getloadavg()[0]:.1f}")
        for round_ in range(args.rounds):
            order = ("direct", "kernel") if round_ % 2 == 0 else ("kernel", "direct")
            got: dict[tuple[str, str], Row] = {}
            for mode in order:
                with bed.engine(mode) as pid:
                    for kind, close in (("long", False), ("new", True)):
                        row = one_round(bed, mode, close, args, pid)
                        got[(mode, kind)] = row
                        rows.setdefault((mode, kind), []).append(row)
                        print(f"round {round_ + 1} {mode:6} {kind:4} {row['rps']:8.0f}/s p50 "
                              f"{row['p50']:.3f} ms  path CPU {row['path_us']:6.2f} us/req "
                              f"(engine process {row['engine_us']:.2f})  ksoftirqd "
                              f"{row['ksoftirqd_us']:.2f}  netfilter {row['nf_us']:.2f}  "
                              f"errors {row['errors']:.0f}",
                              flush=True)
            for kind in ("long", "new"):
                d, k = got[("direct", kind)], got[("kernel", kind)]
                pair = ratios[kind]
                pair.setdefault("rps", []).append(k["rps"] / d["rps"])
                pair.setdefault("p50", []).append(k["p50"] / d["p50"])
                pair.setdefault("cpu", []).append(d["path_us"] / k["path_us"])
                pair.setdefault("extra_us", []).append(k["path_us"] - d["path_us"])
                pair.setdefault("extra_nf", []).append(k["nf_us"] - d["nf_us"])
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}; {ref.describe()}")
        print("medians over rounds, and of the paired ratios (kernel / direct, pair by pair)")
        for kind in ("long", "new"):
            for mode in ("direct", "kernel"):
                got_rows = rows[(mode, kind)]
                print(f"{kind:4} {mode:6} {med(got_rows, 'rps'):8.0f}/s  p50 "
                      f"{med(got_rows, 'p50'):.3f} ms  path CPU {med(got_rows, 'path_us'):6.2f} "
                      f"us/req  ksoftirqd {med(got_rows, 'ksoftirqd_us'):.2f}  errors "
                      f"{sum(r['errors'] for r in got_rows):.0f}")
            pair = ratios[kind]
            print(f"{kind:4} paired: rps {statistics.median(pair['rps']):.2f}x  p50 "
                  f"{statistics.median(pair['p50']):.2f}x  rate on equal CPU "
                  f"{statistics.median(pair['cpu']):.2f}x  extra CPU "
                  f"{statistics.median(pair['extra_us']):+.2f} us per "
                  f"{'request' if kind == 'long' else 'connection'}, in netfilter "
                  f"{statistics.median(pair['extra_nf']):+.2f} us "
                  f"(pairs: {' '.join(f'{x:.2f}' for x in pair['cpu'])})")
    return 0


def med(rows: list[Row], key: str) -> float:
    return statistics.median(r[key] for r in rows)


if __name__ == "__main__":
    sys.exit(main())
