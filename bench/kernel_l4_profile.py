"""Where a request's CPU goes on long connections, kernel engine against no load balancer.

The bed and method of ``bench/kernel_l4_paired.py`` (wrk and both nginx under ``SCHED_FIFO`` on
CPU 1, the lb namespace's forwarding running as softirq in their context there), with
``perf record -C 1 -g -e cpu-clock`` (fixed period, call graphs) for the length of each long
round. The report keeps wrk, nginx and ksoftirqd/1 (the others' 5 % of CPU 1 is left out) and
prints, per mode, microseconds of CPU per request — a symbol's share of the kept samples times
the round's path CPU per request (exact, from schedstat; ``(sampled)`` is what the samples
alone give, less when perf lost samples under load) — and the lb namespace's packets per
request (received and forwarded: the same in every mode when the wire path is the same):

* the inclusive ("children") time of the stages a forwarded packet passes (``STAGES``):
  every netfilter hook together (``nf_hook_slow``), conntrack's lookup (``nf_conntrack_in``),
  the NAT hooks (prerouting: DNAT, or undoing the SNAT on a reply; postrouting: SNAT, or undoing
  the DNAT, with ``nf_xfrm_me_harder``), the confirm hook, routing, the forward path;
* the self time of the symbols that differ most from ``direct``.

perf's sampling and stack walks cost CPU in the measured tasks themselves: compare its figures
only with each other (the rates of this bench are not the paired bench's). Modes as in the
paired bench (``direct``, ``direct+ct``, ``kernel``; ``--variants``: its variants too), once a
round each, the order rotating; medians over rounds (``--modes a,b``: those and ``direct``).

    sudo .venv/bin/python bench/kernel_l4_profile.py [--rounds 2] [--seconds 3] [--variants]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernel_bed import Bed, arguments, session
from kernel_l4_paired import CORE, FLAGS, PAUSE_S, UNDO, VARIANTS, engine_up, one_round

PERIOD_NS = 50_000  # one sample per 50 us of CPU 1's time
COMMS = f"wrk,nginx,ksoftirqd/{CORE}"
STAGES = ("nf_hook_slow", "nf_conntrack_in", "ipv4_conntrack_defrag", "nf_nat_ipv4_pre_routing",
          "nf_nat_ipv4_out", "nf_nat_inet_fn", "nf_nat_manip_pkt", "nf_xfrm_me_harder",
          "nf_confirm", "ipv4_confirm", "nft_do_chain", "tcp_v4_early_demux",
          "ip_route_input_noref", "fib_table_lookup", "ip_forward", "ip_forward_finish",
          "ip_output", "ip_finish_output2", "veth_xmit", "__netif_receive_skb_core",
          "net_rx_action", "tcp_v4_rcv", "tcp_sendmsg")
Profile = dict[str, tuple[float, float]]  # symbol → (children, self) us per request


def record(out: Path) -> subprocess.Popen[bytes]:
    """perf sampling CPU 1 (perf itself on CPU 0)."""
    return subprocess.Popen(
        ["taskset", "-c", "0", "perf", "record", "-q", "-C", CORE, "-g", "-e", "cpu-clock",
         "-c", str(PERIOD_NS), "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def report(data: Path, requests: int, path_us: float) -> Profile:
    """Children and self time of every symbol of the kept tasks, us per request: each one's
    share of the kept samples times the path's CPU per request (``path_us``, measured exactly
    by the paired bench's round), so samples perf lost under load do not shrink the figures."""
    argv = ["perf", "report", "-i", str(data), "--stdio", "-q", "--comms", COMMS]
    counts = subprocess.run([*argv, "--sort", "comm", "-F", "sample,comm"], capture_output=True,
                            text=True, check=False).stdout
    samples = sum(int(line.split()[0]) for line in counts.splitlines()
                  if line.split() and line.split()[0].isdigit())
    text = subprocess.run([*argv, "--children", "-g", "none", "--percentage", "relative",
                           "--sort", "sym", "-F", "overhead_children,overhead,sym"],
                          capture_output=True, text=True, check=False).stdout
    scale = path_us / 100  # a percent of the kept samples, in us per request
    out: Profile = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or not parts[0].endswith("%"):
            continue
        symbol = parts[-1]
        children, self_ = (float(p.rstrip("%")) * scale for p in parts[:2])
        old = out.get(symbol, (0.0, 0.0))
        out[symbol] = (old[0] + children, old[1] + self_)
    sampled = samples * PERIOD_NS / 1000 / requests  # below path_us when perf lost samples
    out["(all)"] = (path_us, path_us)
    out["(sampled)"] = (sampled, sampled)
    return out


def lb_packets(bed: Bed) -> dict[str, int]:
    """The lb namespace's IP counters: packets received and forwarded (the wire path)."""
    text = subprocess.run(["ip", "netns", "exec", bed.lb, "nstat", "-az", "IpInReceives",
                           "IpForwDatagrams"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0]: int(line.split()[1]) for line in text.splitlines()
            if line.startswith("Ip")}


def profiled_round(bed: Bed, mode: str, args: argparse.Namespace, engine: list[int],
                   folder: Path) -> tuple[Profile, dict[str, float]]:
    data = folder / f"perf-{mode}.data"
    perf = record(data)
    time.sleep(0.5)  # perf's start on a loaded CPU 0
    before = lb_packets(bed)
    try:
        row = one_round(bed, mode, False, args, engine)
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
    after = lb_packets(bed)
    for name, value in after.items():  # per request, both directions (the wire path)
        row[name] = (value - before.get(name, 0)) / row["requests"]
    return report(data, int(row["requests"]), row["cpu_us"] - row["engine_us"]), row


def measure(bed: Bed, args: argparse.Namespace, modes: tuple[str, ...]
            ) -> dict[str, list[Profile]]:
    got: dict[str, list[Profile]] = {}
    for round_ in range(args.rounds):
        shift = round_ % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            with bed.engine("kernel" if mode.startswith("kernel") else "direct",
                            FLAGS.get(mode, ())) as pid:
                engine = engine_up(bed, mode, pid)
                try:
                    time.sleep(PAUSE_S)
                    profile, row = profiled_round(bed, mode, args, engine, bed.root)
                finally:
                    if mode in UNDO:
                        subprocess.run(["ip", "netns", "exec", bed.lb, "sh", "-c", UNDO[mode]],
                                       check=False)
            got.setdefault(mode, []).append(profile)
            print(f"round {round_ + 1} {mode:16} {row['rps']:8.0f}/s p50 {row['p50']:.3f} ms "
                  f"path CPU {row['cpu_us']:.2f} us/req, sampled {profile['(sampled)'][0]:.2f} "
                  f"us/req; lb packets per request: received {row.get('IpInReceives', 0):.2f}"
                  f" forwarded {row.get('IpForwDatagrams', 0):.2f}", flush=True)
    return got


def median(profiles: list[Profile], symbol: str, which: int) -> float:
    return statistics.median(p.get(symbol, (0.0, 0.0))[which] for p in profiles)


def summary(modes: tuple[str, ...], got: dict[str, list[Profile]], top: int = 40) -> None:
    head = "".join(f"{m[:14]:>15}" for m in modes)
    print(f"\nus per request, median over rounds; inclusive (children) time of the stages\n"
          f"{'stage':28}{head}")
    for stage in ("(all)", "(sampled)", *STAGES):
        print(f"{stage:28}" + "".join(f"{median(got[m], stage, 0):15.3f}" for m in modes))
    ranked = sorted({s for m in modes for p in got[m] for s in p if not s.startswith("(")},
                    key=lambda s: -max(abs(median(got[m], s, 1) - median(got["direct"], s, 1))
                                       for m in modes))
    print(f"\nself time of the {top} symbols that differ most from direct (us per request)\n"
          f"{'symbol':40}{head}")
    for symbol in ranked[:top]:
        print(f"{symbol[:39]:40}" + "".join(f"{median(got[m], symbol, 1):15.3f}"
                                            for m in modes))


def main() -> int:
    args = arguments(__doc__ or "", extra=(
        ("--variants", f"also the paired bench's variants: {', '.join(VARIANTS)}"),))
    if args is None:
        return 2
    args.perf = False  # the paired bench's own per-process profile: not with this one
    os.sched_setaffinity(0, {0})
    with session("podway-kernel-profile-") as (bed, ref):
        print(f"load average at the start {os.getloadavg()[0]:.1f}", flush=True)
        modes = ("direct", "direct+ct", "kernel",
                 *(m for m in VARIANTS if args.variants and m != "direct+ct"))
        if args.modes:  # ``direct`` first: every other mode is compared with it
            modes = ("direct", *(m for m in args.modes.split(",") if m != "direct"))
        got = measure(bed, args, modes)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}; {ref.describe()}")
        summary(modes, got)
    return 0


if __name__ == "__main__":
    sys.exit(main())
