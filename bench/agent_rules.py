"""Benchmark of the NodePortLocal kernel backends, in a throw-away network namespace.

Measures, for nftables (through libnftables, the default, and through the ``nft`` command,
"nftables-cli") and iptables: a full sync of 1,000 and 5,000 mappings, and the p50/p99
of one incremental add or remove with 1,000 mappings in place (each change is one batch, one
process: what a worker does for one pod). Targets: full sync of 1,000 <= 200 ms; single change
p99 <= 10 ms with nftables. Needs root (it creates a namespace); prints a reason otherwise.
Every time is also printed as a ratio to the machine-speed reference (``bench/speedref.py``).

    .venv/bin/python bench/agent_rules.py [--changes 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid

from speedref import Reference, measure

from podway.programs.agent.rules import make_rules
from podway.programs.agent.types import Rule


def mappings(count: int, *, first_port: int = 20000) -> list[Rule]:
    return [Rule(protocol="tcp", node_port=first_port + i,
                 pod_ip=f"198.18.{(i // 250) % 250 + 1}.{i % 250 + 2}", pod_port=8080)
            for i in range(count)]


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def bench_backend(kind: str, netns: str, changes: int, ref: Reference) -> list[str]:
    rules = make_rules(kind.removesuffix("-cli"), netns=netns, nft_lib=not kind.endswith("-cli"))
    lines = []
    try:
        for count in (1000, 5000):
            await rules.cleanup()
            start = time.perf_counter()
            await rules.sync(mappings(count))
            took = (time.perf_counter() - start) * 1000
            installed = await rules.installed()
            assert installed is not None
            assert len(installed) == count, (kind, count, len(installed))
            lines.append(f"{kind:12} full sync {count:5} mappings: {took:8.1f} ms "
                         f"({ref.ratio(took / 1000)})")
        await rules.sync(mappings(1000))
        add_ms: list[float] = []
        remove_ms: list[float] = []
        for i in range(changes):
            extra = Rule(protocol="tcp", node_port=40000 + i, pod_ip="198.18.250.2",
                         pod_port=9000)
            start = time.perf_counter()
            await rules.apply(add=[extra], remove=[])
            add_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            await rules.apply(add=[], remove=[extra])
            remove_ms.append((time.perf_counter() - start) * 1000)
        both = add_ms + remove_ms
        def fig(millis: float) -> str:
            return f"{millis:.1f} ms ({ref.ratio(millis / 1000)})"

        lines.append(f"{kind:12} single change, 1000 in place: add p50 "
                     f"{fig(statistics.median(add_ms))} p99 {fig(p(add_ms, 0.99))}; "
                     f"remove p50 {fig(statistics.median(remove_ms))} "
                     f"p99 {fig(p(remove_ms, 0.99))}; all p99 {fig(p(both, 0.99))}")
    finally:
        await rules.cleanup()
        rules.close()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200, help="single changes to time")
    args, _ = parser.parse_known_args()
    if os.geteuid() != 0:
        print("skipped: needs root to create a network namespace")
        return 0
    ref = measure()
    print(ref.describe(), flush=True)
    netns = f"pwbench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        for kind, tool in (("nftables", "nft"), ("nftables-cli", "nft"),
                           ("iptables", "iptables-restore")):
            if shutil.which(tool) is None:
                print(f"{kind}: skipped ({tool} not installed)")
                continue
            for line in asyncio.run(bench_backend(kind, netns, args.changes, ref)):
                print(line)
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
    print(ref.check_again())
    return 0


if __name__ == "__main__":
    sys.exit(main())
