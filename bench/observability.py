"""Observability benchmark: what bounded Envoy stats save, and what the dashboard costs.

For each size (default 1,000 and 4,000 pools, one route each) and each stats mode
(``bounded``, ``detailed``), a standalone Podway and a real Envoy:

* first config served: start → Envoy's ACK of the route configuration (all clusters created);
* Envoy's memory (``server.memory_allocated``) once served;
* one Prometheus scrape of Envoy: its size (series) and time;
* the dashboard: one engine sample — stats only (what it does when no pool has an active
  health check), then with member health (``/clusters``) — one view document built from the
  state and that sample, and the document's JSON size.

Times print in ms and as a ratio to the machine-speed reference (``bench/speedref.py``).

    python bench/observability.py [--sizes 1000,4000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import tempfile
import time
from pathlib import Path

from speedref import measure
from xds_push import Acks, Figures, free_port, manifests

from podway.envoy import types
from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import EnvoyStats
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.readers.dashboard import engine_view, view
from podway.translate import TranslateOptions


async def bench(pools: int, stats: EnvoyStats, out: Figures) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifests(root, pools, 9)  # members at 127.0.0.1:9: never contacted here
        acks = Acks()
        standalone = Standalone(StandaloneOptions(
            manifests=root, drain_s=0, envoy_stats=stats, translate=TranslateOptions(
                address="127.0.0.1", http_port=free_port(), https_port=free_port())))
        standalone.event_hooks.append(acks)
        rds_ack = acks.next(types.ROUTE)
        began = time.perf_counter()
        task = asyncio.create_task(standalone.run())
        try:
            state = await standalone.pipeline.wait_for(lambda s: s.generation >= 1)
            engine = await standalone.engine()
            assert engine is not None
            await engine.wait_ready(limit_s=300)
            await asyncio.wait_for(rds_ack, 300)
            out.time(f"{pools} pools, {stats}: first config served",
                     time.perf_counter() - began, digits=0)
            address = await engine.wait_started()
            memory = (await admin.stats(address, r"^server\.memory_allocated$"))
            print(f"  {'':48} Envoy memory {memory['server.memory_allocated'] / 2**20:.0f} MiB")
            t0 = time.perf_counter()
            _, text = await admin.request(address, "/stats/prometheus", limit_s=60)
            series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
            out.time(f"  Envoy scrape ({series} series, {len(text) // 1024} KiB)",
                     time.perf_counter() - t0)
            t0 = time.perf_counter()
            await engine_view.sample(address, now=time.monotonic(), health=False, limit_s=60)
            out.time("  dashboard engine sample, stats only", time.perf_counter() - t0)
            t0 = time.perf_counter()
            sample = await engine_view.sample(address, now=time.monotonic(), limit_s=60)
            out.time("  .. with member health (/clusters)", time.perf_counter() - t0)
            t0 = time.perf_counter()
            document = view.build(state, options=view.ViewOptions(
                detailed_stats=stats is EnvoyStats.DETAILED), now=sample, before=sample)
            built = time.perf_counter() - t0
            size = len(json.dumps(document))
            out.time(f"  dashboard document ({size // 1024} KiB JSON)", built)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    ref = measure()
    print(ref.describe(), flush=True)
    out = Figures(ref)
    for size in (int(s) for s in args.sizes.split(",")):
        for stats in EnvoyStats:
            await bench(size, stats, out)
    print(ref.check_again())


if __name__ == "__main__":
    asyncio.run(main())
