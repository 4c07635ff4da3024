"""Kernel engine vs no load balancer on one core the machine's load cannot take: the targets.

The machine is shared (2 cores, other engineers' work on both): in a plain run a round's rate
follows the CPU share it happens to get, and even the CPU per request of one mode moved 3x
between rounds (load 18-25), so rates and their ratios said nothing. This bench takes the
load out instead of averaging over it:

* **One dedicated core.** wrk (client namespace) and both nginx backends run pinned to CPU 1
  under ``SCHED_FIFO`` (priority 50) for the length of a round only. Ordinary (``SCHED_OTHER``)
  tasks of anyone else then cannot preempt them; the kernel's RT throttling keeps 5 % of the
  core for the rest (``sched_rt_runtime_us`` 950,000 of 1,000,000), so the path gets ~95 % of
  CPU 1 in every round, whatever the load on the machine. The kernel engine process (Python:
  health checks only, not in the packet path) and the bench itself stay on CPU 0; the bench
  goes real-time on CPU 1 only to start the wrk processes (``spawning``), so both start at once.
* **The packet path runs in those tasks.** Everything between client and backends is veth:
  a send queues the packet on the sending CPU's backlog and the NET_RX softirq runs when the
  sender re-enables bottom halves, in the sender's context and on its CPU; the lb namespace's
  forwarding, conntrack, NAT and the engine's rules are that softirq. The bench checks it
  every round: ksoftirqd/1's CPU (softirq work deferred to the thread, measured ~0.1 us a
  connection) is printed, and CPU 1's busy time beside the tasks' own.
* **CPU time that includes the softirq.** This kernel has no IRQ time accounting
  (``CONFIG_IRQ_TIME_ACCOUNTING`` unset, tick accounting): softirq time spent in a task's
  context is part of its runtime (``/proc/<pid>/schedstat``, in ns) and its system time. So
  the CPU per request is: wrk's user+system time (``getrusage`` of the reaped children: the
  tick-sampled split scaled to the exact runtime) + both nginx's runtime from schedstat +
  the engine process's CPU, divided by the requests wrk completed.
* **Why this is the target's measure.** With the core dedicated, the rate is the rate one
  core sustains on that path and CPU per request is its inverse; so "kernel rps / direct rps"
  and the p50 ratio compare the two paths on equal CPU (the issue's bed, client, load
  balancer and backends sharing the machine's CPUs, with the share made equal), and "kernel
  CPU per connection minus direct CPU per connection" is the engine's whole cost per new
  connection: conntrack, NAT, its rules and the engine process (health checks, divided over
  the round's connections). ``direct`` is no load balancer: the lb namespace only routes (no
  conntrack). The ratios depend on how cheap the rest of the path is (here nginx answering 3
  bytes: ~6 us a request for client, server and routing together); the extra microseconds
  are the engine's own and do not.
* **Pairs.** Short rounds (default 3 s, so other work gets CPU 1 back soon); every mode once a
  round, the order rotating, and each against ``direct`` of its round; the median and the
  range over rounds of those ratios are printed. Both modes split the 16 connections 8/8 over
  the backends (``kernel`` through the engine's one-member Services ``web-b1``/``web-b2``,
  ports 81/82; ``direct`` to the backends themselves), so neither is bounded by one busier
  backend. The lb's conntrack table is flushed before every round (a new-connection round
  leaves ~80,000 TIME_WAIT entries for 120 s), so every round meets the same table size.
* **Variants** (``--variants``): ``kernel-traffic``, the engine with
  ``--member-traffic-counters`` (the ``count`` chain on the forward hook: a lookup for every
  packet; what every engine did before they became opt-in); ``kernel-noconn``, the default
  table without its per-member connection counter (the first rule of ``postrouting``, which
  only a flow's first packet passes); ``direct+ct`` (no load balancer, every flow tracked:
  conntrack turned on by a chain on the ``output`` hook, which forwarded packets never enter)
  and ``direct+ct-fwd`` (the same chain on ``forward``: conntrack plus a rule on every packet,
  what ``direct+ct`` measured before 2026-12-05), to weigh conntrack, NAT and the counters
  apart; ``kernel-liberal`` and ``kernel-nocsum``, the engine with the lb namespace's
  ``nf_conntrack_tcp_be_liberal=1`` or ``nf_conntrack_checksum=0`` (per-packet conntrack work;
  undone after the mode); ``kernel-snat`` (``snat to`` the lb's address towards each member
  from a map instead of ``masquerade``) and ``kernel-nosnat`` (DNAT only, the transparent
  return path: the bed's backends route back through the lb). ``--modes a,b`` runs those
  (with ``direct``) only.

Each round prints CPU 1's busy time not accounted to the path ("other": the 5 % others kept,
interrupts; and steal, if the VM's host took the vCPU), so a round disturbed after all shows.
``--perf`` adds perf samples (cpu-clock) of wrk and nginx and the part in netfilter symbols per
request (perf's own sampling costs CPU in the measured tasks: compare with ``--perf`` only
against itself). This VM has no hardware counters (``perf stat -e instructions``: not
supported), and callgrind does not see the kernel, where all of this path's cost is.

    sudo .venv/bin/python bench/kernel_l4_paired.py [--rounds 8] [--seconds 3] [--variants]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernel_bed import (
    BACKENDS,
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
CORE = "1"  # the measured path's core; the engine process and the bench itself keep to CPU 0
PAUSE_S = 1.0  # between rounds: CPU 1 back to everyone
# A round lasting this much longer than asked had a wrk process start late (seen once in ~60
# rounds, 1 s late): the other ran alone meanwhile, and the summed rates overstate the core's.
# Its CPU per request stands; its rate and p50 are left out of the paired ratios.
LATE_S = 0.5


def runtime_s(pid: int) -> float:
    """Exact CPU time of every thread of ``pid`` (schedstat, ns; includes softirq work run in
    its context, this kernel having no IRQ time accounting)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError):
        pass
    return total / 1e9


def core_times() -> dict[str, float]:
    """CPU 1's time by kind since boot, in seconds (/proc/stat)."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{CORE} "):
            ticks = dict(zip(names, (int(x) for x in line.split()[1:9]), strict=True))
            hz = os.sysconf("SC_CLK_TCK")
            busy = sum(v for k, v in ticks.items() if k not in ("idle", "iowait"))
            return {"busy": busy / hz, "softirq": ticks["softirq"] / hz,
                    "steal": ticks["steal"] / hz}
    raise RuntimeError(f"no cpu{CORE} in /proc/stat")


def ksoftirqd() -> int:
    out = subprocess.run(["pgrep", "-x", f"ksoftirqd/{CORE}"], capture_output=True, text=True,
                         check=False).stdout.split()
    return int(out[0]) if out else 0


def children_cpu_s() -> float:
    """User + system time of this process's reaped children (wrk, once its round ended)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


@contextmanager
def realtime(pids: list[int]) -> Iterator[None]:
    """``pids`` (every thread) SCHED_FIFO 50 on CPU 1 for the block, then back to normal."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", CORE, str(pid)], capture_output=True,
                       check=True)
        subprocess.run(["chrt", "-f", "-a", "-p", "50", str(pid)], capture_output=True,
                       check=True)
    try:
        yield
    finally:
        for pid in pids:
            subprocess.run(["chrt", "-o", "-a", "-p", "0", str(pid)], capture_output=True,
                           check=False)


def spawning(on: bool) -> None:
    """The bench itself SCHED_FIFO on CPU 1 (``on``) or back to normal on CPU 0: wrk, started
    while on, inherits both, and both wrk processes start within a millisecond of each other.
    (Started from the bench at normal priority on the loaded CPU 0, the second wrk process was
    seen to start a second after the first, which then ran alone for a while and overstated
    the rate.)"""
    if on:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
        os.sched_setaffinity(0, {int(CORE)})
    else:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        os.sched_setaffinity(0, {0})


def one_round(bed: Bed, mode: str, close: bool, args: argparse.Namespace,
              engine: list[int]) -> Row:
    nginx = [p.pid for p in bed.procs]
    # The lb's conntrack table starts empty (each new-connection round leaves ~80,000 entries in
    # TIME_WAIT for 120 s): every round of every mode pays for the same table size.
    subprocess.run(["ip", "netns", "exec", bed.lb, "conntrack", "-F"], capture_output=True,
                   check=False)
    soft = ksoftirqd()
    before = {p: runtime_s(p) for p in [*nginx, soft]}
    engine_before = sum(proc_cpu_s(p) for p in engine)
    profile = Profile(bed, bed.root) if args.perf else None
    urls = DIRECT_URLS if mode.startswith("direct") else PINNED_URLS
    with realtime(nginx):
        reaped, core0, t0 = children_cpu_s(), core_times(), time.monotonic()
        done: list[int] = []

        def started(pids: list[int]) -> None:
            spawning(False)
            if profile is not None:
                profile.start(pids)

        spawning(True)
        try:
            rps, p50, errors = wrk(bed, urls, seconds=args.seconds, connections=args.connections,
                                   close=close, done=done, started=started)
        finally:
            spawning(False)
        core = {k: v - core0[k] for k, v in core_times().items()}
        wall = time.monotonic() - t0
        wrk_s = children_cpu_s() - reaped  # only the round's wrk processes were reaped
    requests = done[0]
    _, netfilter = profile.stop(requests) if profile else (0.0, float("nan"))
    nginx_s = sum(runtime_s(p) - before[p] for p in nginx)
    eng = sum(proc_cpu_s(p) for p in engine) - engine_before
    softirqd = runtime_s(soft) - before[soft]
    path = wrk_s + nginx_s
    return {"rps": rps, "p50": p50, "errors": errors, "requests": float(requests),
            "cpu_us": (path + eng) / requests * 1e6, "engine_us": eng / requests * 1e6,
            "ksoftirqd_us": softirqd / requests * 1e6, "nf_us": netfilter,
            "core_share": path / wall, "softirq_share": core["softirq"] / wall,
            "other_share": (core["busy"] - path - softirqd) / wall,
            "steal_share": core["steal"] / wall, "wall": wall,
            "late": float(wall > args.seconds + LATE_S)}


def show(round_: int, mode: str, kind: str, row: Row) -> None:
    print(f"round {round_ + 1:2} {mode:14} {kind:4} {row['rps']:8.0f}/s p50 {row['p50']:.3f} ms"
          f"  CPU {row['cpu_us']:6.2f} us/{'req' if kind == 'long' else 'conn'} (engine process"
          f" {row['engine_us']:.2f})  ksoftirqd/{CORE} {row['ksoftirqd_us']:.2f}  over "
          f"{row['wall']:.2f} s CPU {CORE}: "
          f"path {row['core_share']:.0%} softirq {row['softirq_share']:.0%} other "
          f"{row['other_share']:+.0%} steal {row['steal_share']:.0%}  netfilter "
          f"{row['nf_us']:.2f}  errors {row['errors']:.0f}"
          + ("  LATE START: rate not paired" if row["late"] else ""), flush=True)


# Variants (``--variants``): engine flags (FLAGS), or commands applied to the table after the
# engine wrote it (the bed's services do not change during a round). (Measured and dropped:
# counting by the conntrack entry's reply tuple, ``counter name ct reply ip saddr . ct
# protocol . ct reply proto-src map ...``, one rule per protocol: 0.3-0.6 us a request more than
# the engine's two rules on payload fields.)
FLAGS = {"kernel-traffic": ("--member-traffic-counters",)}
_CT_PROBE = ("nft add table ip podway_bench && nft add chain ip podway_bench probe "
             "'{{ type filter hook {hook} priority 0; }}' && nft add rule ip podway_bench "
             "probe ct state established accept")
VARIANTS = {
    "kernel-traffic": "true",
    # postrouting with its masquerade only: what counting connections costs (per connection)
    "kernel-noconn": "nft flush chain ip podway_l4 postrouting && nft add rule ip podway_l4 "
                     "postrouting meta mark and 0x00400000 == 0x00400000 masquerade",
    # No load balancer, but every forwarded flow tracked: what conntrack alone costs, apart
    # from NAT and the engine's rules. A ct rule turns conntrack on for the whole namespace
    # (every hook), whichever hook its chain is on; the chain is on ``output``, which forwarded
    # packets never enter, so they pay conntrack and nothing else (the engine's own table has
    # no chain they enter per packet either: its NAT chains see a flow's first packet only).
    "direct+ct": _CT_PROBE.format(hook="output"),
    # The same with the chain on ``forward`` (what ``direct+ct`` was until 2026-12-05 15:20):
    # conntrack plus one rule evaluated for every forwarded packet, which no kernel mode has.
    "direct+ct-fwd": _CT_PROBE.format(hook="forward"),
    # SNAT to the lb's address towards each member from a map, instead of masquerade (which
    # looks the out-interface's address up for every new flow): per connection only.
    "kernel-snat": "nft flush chain ip podway_l4 postrouting && nft add rule ip podway_l4 "
                   "postrouting ct status dnat counter name ip daddr . meta l4proto . th dport "
                   "map @member_connections && nft add rule ip podway_l4 postrouting meta mark "
                   "and 0x00400000 == 0x00400000 snat ip to ip daddr map { "
                   + ", ".join(f"{far} : {near}" for near, far in BACKENDS.values()) + " }",
    # DNAT only, as with ``podway.io/client-ip: transparent`` (the bed's backends route back
    # through the lb): what the SNAT costs per packet and per connection.
    "kernel-nosnat": "nft flush chain ip podway_l4 postrouting && nft add rule ip podway_l4 "
                     "postrouting ct status dnat counter name ip daddr . meta l4proto . th "
                     "dport map @member_connections",
    # Per-packet conntrack sysctls of the lb namespace (undone after the mode's round):
    # window tracking not enforced (only out-of-window RSTs are invalid) ...
    "kernel-liberal": "sysctl -qw net.netfilter.nf_conntrack_tcp_be_liberal=1",
    # ... and no checksum check of packets conntrack sees first (prerouting).
    "kernel-nocsum": "sysctl -qw net.netfilter.nf_conntrack_checksum=0",
}
UNDO = {"direct+ct": "nft delete table ip podway_bench",
        "direct+ct-fwd": "nft delete table ip podway_bench",
        "kernel-liberal": "sysctl -qw net.netfilter.nf_conntrack_tcp_be_liberal=0",
        "kernel-nocsum": "sysctl -qw net.netfilter.nf_conntrack_checksum=1"}


def engine_up(bed: Bed, mode: str, pid: int | None) -> list[int]:
    """The engine's processes (pinned to CPU 0), after applying ``mode``'s variant."""
    engine = children(pid) if pid else []
    for p in engine:
        subprocess.run(["taskset", "-a", "-p", "-c", "0", str(p)], capture_output=True,
                       check=False)
    if mode in VARIANTS:
        subprocess.run(["ip", "netns", "exec", bed.lb, "sh", "-c", VARIANTS[mode]], check=True)
    return engine


Rows = dict[tuple[str, str], list[Row]]  # (mode, kind) → its rounds
Ratios = dict[tuple[str, str], dict[str, list[float]]]  # (mode, kind) → against direct


def measure(bed: Bed, args: argparse.Namespace, modes: tuple[str, ...]) -> tuple[Rows, Ratios]:
    """Every mode once a round (the order rotating); each against ``direct`` of its round."""
    rows: Rows = {}
    ratios: Ratios = {}
    for round_ in range(args.rounds):
        shift = round_ % len(modes)
        got: dict[tuple[str, str], Row] = {}
        for mode in modes[shift:] + modes[:shift]:
            with bed.engine("kernel" if mode.startswith("kernel") else "direct",
                            FLAGS.get(mode, ())) as pid:
                engine = engine_up(bed, mode, pid)
                try:
                    for kind, close in (("long", False), ("new", True)):
                        time.sleep(PAUSE_S)
                        row = one_round(bed, mode, close, args, engine)
                        got[(mode, kind)] = row
                        rows.setdefault((mode, kind), []).append(row)
                        show(round_, mode, kind, row)
                finally:
                    if mode in UNDO:
                        subprocess.run(["ip", "netns", "exec", bed.lb, "sh", "-c", UNDO[mode]],
                                       check=False)
        for (mode, kind), k in got.items():
            if mode == "direct":
                continue
            d = got[("direct", kind)]
            pair = ratios.setdefault((mode, kind), {"rps": [], "p50": []})
            if not (k["late"] or d["late"]):
                pair["rps"].append(k["rps"] / d["rps"])
                pair["p50"].append(k["p50"] / d["p50"])
            pair.setdefault("extra_us", []).append(k["cpu_us"] - d["cpu_us"])
            pair.setdefault("extra_nf", []).append(k["nf_us"] - d["nf_us"])
    return rows, ratios


def spread(values: list[float], fmt: str) -> str:
    """``median (min to max)`` of ``values``."""
    if not values:
        return "n/a"
    return (f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)} to "
            f"{format(max(values), fmt)})")


def summary(modes: tuple[str, ...], rows: Rows, ratios: Ratios, connections: int) -> None:
    """Medians and paired ratios. ``in flight`` is the mean time a request spends in the closed
    loop by Little's law (connections / rate): p50 follows it when the core is the bound."""
    print("medians over rounds; paired: each mode against direct of its round, median (range)")
    for kind in ("long", "new"):
        unit = "request" if kind == "long" else "connection"
        for mode in modes:
            got = rows[(mode, kind)]
            print(f"{kind:4} {mode:14} {med(got, 'rps'):8.0f}/s  p50 {med(got, 'p50'):.3f} ms  "
                  f"(in flight {connections / med(got, 'rps') * 1000:.3f} ms)  "
                  f"CPU {med(got, 'cpu_us'):6.2f} us per {unit} (engine process "
                  f"{med(got, 'engine_us'):.2f})  path's share of CPU {CORE} "
                  f"{med(got, 'core_share'):.0%}  ksoftirqd/{CORE} {med(got, 'ksoftirqd_us'):.2f}"
                  f" us  errors {sum(r['errors'] for r in got):.0f}")
        for mode in modes[1:]:
            pair = ratios[(mode, kind)]
            print(f"{kind:4} {mode:14} paired over {len(pair['extra_us'])} "
                  f"(rates {len(pair['rps'])}): rps "
                  f"{spread(pair['rps'], '.3f')}x  p50 {spread(pair['p50'], '.3f')}x  extra CPU "
                  f"per {unit} {spread(pair['extra_us'], '+.2f')} us"
                  + (f"  in netfilter {spread(pair['extra_nf'], '+.2f')} us"
                     if not any(math.isnan(x) for x in pair["extra_nf"]) else ""))


def main() -> int:
    args = arguments(__doc__ or "", extra=(
        ("--perf", "perf cpu-clock samples of wrk and nginx: the netfilter part per request"),
        ("--variants", f"also the table's variants: {', '.join(VARIANTS)}")))
    if args is None:
        return 2
    spawning(False)  # the bench itself stays off the measured core
    with session("podway-kernel-paired-") as (bed, ref):
        print(f"load average at the start {os.getloadavg()[0]:.1f}; path on CPU {CORE} "
              f"under SCHED_FIFO, {args.seconds:g} s rounds", flush=True)
        modes = ("direct", "kernel", *(VARIANTS if args.variants else ()))
        if args.modes:  # ``direct`` first: every other mode is paired with it
            modes = ("direct", *(m for m in args.modes.split(",") if m != "direct"))
        rows, ratios = measure(bed, args, modes)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}; {ref.describe()}")
        summary(modes, rows, ratios, args.connections)
    return 0


def med(rows: list[Row], key: str) -> float:
    return statistics.median(r[key] for r in rows)


if __name__ == "__main__":
    sys.exit(main())
