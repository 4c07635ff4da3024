"""L4 through no load balancer, the kernel engine and Envoy's TCP proxy, side by side.

    client 198.18.0.2 ── 198.18.0.1 lb 198.18.1.1 ── 198.18.1.2 b1  (nginx, 1 worker)
                          VIP 198.18.0.10  198.18.2.1 ── 198.18.2.2 b2  (nginx, 1 worker)

Modes, interleaved round by round (the machine is shared: only figures of one run compare):

* ``direct``: no load balancer — the client asks b1 and b2 themselves, half of the connections
  each (the lb namespace only routes);
* ``kernel``: ``podway run --engine kernel`` in the lb namespace (nftables DNAT, SNAT);
* ``envoy``: ``podway run`` (Envoy's TCP proxy, one worker) in the lb namespace.

Each mode is measured with wrk in the client namespace (HTTP/1.1 to nginx: the bytes are
opaque to both load balancers): ``long`` keeps ``--connections`` connections open (rps, p50);
``new`` closes each connection after its one request (connections per second). CPU: the whole
machine's busy time per connection (/proc/stat; includes wrk and nginx, and whatever else runs
on the machine — compare modes, not absolute values), and the engine process's own CPU per
connection (Envoy; the kernel engine's process only runs health checks, its DNAT is softirq
time, counted in the machine's figure).

PAWS-refused SYNs: the kernel engine SNATs to the lb's own address, the one Envoy's
connections to the same backends came from. A backend keeps the TIME_WAIT of each connection it
closed (60 s) with that connection's TCP timestamp; a SNATed SYN on the same 4-tuple carries the
client's timestamp, which may be older, and is refused (PAWS): the client retries after 1 s.
So a ``kernel new`` right after an ``envoy`` round would show collapsed connections per
second (docs/kernel.md, "SNAT and TIME_WAIT"), and even the 16 SYNs of a ``long`` round can
wait 1 s: each measurement therefore starts with the backends' TIME_WAIT sockets ended (``ss
-K``), as on a host where no other mode ran, and the count ended is printed;
``--keep-time-wait`` leaves them, to show the effect.

The bed (namespaces, nginx, manifests) is ``bench/kernel_bed.py``; ``b1 share`` is the part of
the round's segments backend b1 received (0.50: an even split).

    sudo .venv/bin/python bench/kernel_l4.py [--rounds 3] [--seconds 5] [--keep-time-wait]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernel_bed import (
    DIRECT_URLS,
    VIP_URLS,
    Bed,
    arguments,
    b1_share,
    backend_segments,
    busy_jiffies,
    children,
    forget_time_wait,
    interleaved,
    paws_rejects,
    proc_cpu_s,
    session,
    wrk,
)

MODES = ("direct", "kernel", "envoy")
Row = tuple[float, float, float, float, int, float]  # rps, p50, machine us, engine us, errors, b1


def measure_mode(bed: Bed, pid: int | None, urls: list[str], args: argparse.Namespace,
                 close: bool) -> Row:
    pids = children(pid) if pid else []
    cpu0 = sum(proc_cpu_s(p) for p in pids)
    paws0, segs0 = paws_rejects(bed), backend_segments(bed)
    busy0, t0 = busy_jiffies(), time.monotonic()
    rps, p50, errors = wrk(bed, urls, seconds=args.seconds, connections=args.connections,
                           close=close)
    wall = time.monotonic() - t0
    busy = (busy_jiffies() - busy0) / os.sysconf("SC_CLK_TCK")
    total = rps * wall
    engine_cpu = sum(proc_cpu_s(p) for p in pids) - cpu0
    share = b1_share(segs0, backend_segments(bed))
    print(f"  {'conn' if close else 'req'}: {rps:9.0f}/s p50 {p50:.3f} ms  machine "
          f"{busy / total * 1e6:6.1f} us  engine process {engine_cpu / total * 1e6:6.1f} us  "
          f"errors {errors}  b1 share {share:.2f}  PAWS-refused SYNs {paws_rejects(bed) - paws0}",
          flush=True)
    return rps, p50, busy / total * 1e6, engine_cpu / total * 1e6, errors, share


def main() -> int:
    args = arguments(__doc__ or "", extra=(
        ("--keep-time-wait", "leave the backends' TIME_WAIT sockets of the previous mode (by "
         "default each mode starts without them)"),))
    if args is None:
        return 2
    results: dict[tuple[str, str], list[Row]] = {}
    with session("podway-kernel-bench-", args.body_bytes) as (bed, _):
        for round_, mode in interleaved(MODES, args.rounds):
            with bed.engine(mode) as pid:
                # Two wrk processes in every mode (the same client CPU): to b1 and b2
                # directly, or both to the VIP.
                urls = DIRECT_URLS if mode == "direct" else VIP_URLS
                for kind, close in (("long", False), ("new", True)):
                    ended = 0 if args.keep_time_wait else forget_time_wait(bed)
                    print(f"round {round_ + 1} {mode:6} {kind:4}"
                          + (f" ({ended} TIME_WAIT ended)" if ended else ""), end="")
                    results.setdefault((mode, kind), []).append(
                        measure_mode(bed, pid, urls, args, close))
        print("\nmedians over rounds (us per request or connection: CPU time)")
        base = {k: statistics.median(r[2] for r in results[("direct", k)]) for k in ("long", "new")}
        for kind in ("long", "new"):
            direct = statistics.median(r[0] for r in results[("direct", kind)])
            for mode in MODES:
                rows = results[(mode, kind)]
                rps = statistics.median(r[0] for r in rows)
                machine = statistics.median(r[2] for r in rows)
                print(f"{kind:4} {mode:6} {rps:9.0f}/s ({rps / direct:.2f}x direct)  p50 "
                      f"{statistics.median(r[1] for r in rows):.3f} ms  machine CPU "
                      f"{machine:6.1f} us (+{machine - base[kind]:.1f} over direct)  engine "
                      f"process {statistics.median(r[3] for r in rows):6.1f} us  errors "
                      f"{sum(r[4] for r in rows)}  b1 share "
                      f"{statistics.median(r[5] for r in rows):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
