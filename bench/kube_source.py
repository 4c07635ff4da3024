"""Benchmark of the Kubernetes source against the in-process API emulator.

Fills the emulator with N Services, N EndpointSlices, N Pods and N HTTPRoutes, then measures:
the time from start to the first complete snapshot (list of every kind, parse, merge); the
latency from one API write to the update carrying it (p50/p99 over ``--changes`` writes, one
at a time, debounce 0: the watch path plus parsing and the snapshot patch); and the memory the
source retains for that cluster (tracemalloc, a separate run); and, with the controller's
coalescing (debounce 20 ms, max wait 200 ms), the latency of a lone change written ``--after-ms``
after the previous update went out (the leading edge: it should wait only for the rest of the
debounce since that update, not a whole debounce). Each time also prints as a ratio to a fixed
pure-Python workload measured in the same run, so figures compare across machines and days.

    .venv/bin/python bench/kube_source.py [--objects 1000] [--changes 200] [--after-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
from typing import Any

from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator
from podway.sources.kube import KubeSource, KubeSourceSettings


def reference_ms() -> float:
    """A fixed pure-Python workload (dicts, strings, sorting): the machine-speed yardstick."""
    began = time.perf_counter()
    total = 0
    for i in range(200_000):
        d = {"name": f"svc-{i}", "port": i % 65535, "labels": {"app": str(i % 97)}}
        total += len(d["name"]) + d["port"]
    sorted(str(i * 7919 % 100_003) for i in range(100_000))
    return (time.perf_counter() - began) * 1000


def fill(emu: KubeEmulator, count: int) -> None:
    emu.install_crd("HTTPRoute")
    for i in range(count):
        ns, name = f"ns{i % 20}", f"app{i}"
        emu.put("services", {"metadata": {"name": name, "namespace": ns},
                             "spec": {"selector": {"app": name}, "ports": [{"port": 80,
                                                                            "targetPort": 8080}]}})
        emu.put("endpointslices", {
            "metadata": {"name": f"{name}-1", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"port": 8080}],
            "endpoints": [{"addresses": [f"198.18.{i // 250}.{i % 250 + 1}"],
                           "conditions": {"ready": True}, "nodeName": f"n{i % 10}"}]})
        emu.put("pods", {
            "metadata": {"name": f"{name}-1", "namespace": ns, "labels": {"app": name},
                         "annotations": {"nodeportlocal.antrea.io": "[]",
                                         "kubectl.kubernetes.io/last-applied-configuration":
                                         "x" * 2000},
                         "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:x": {}}}] * 5},
            "spec": {"nodeName": f"n{i % 10}", "containers": [
                {"name": "c", "image": "echo", "ports": [{"containerPort": 8080}],
                 "env": [{"name": f"E{j}", "value": "v" * 40} for j in range(10)]}]},
            "status": {"phase": "Running", "podIP": f"198.18.{i // 250}.{i % 250 + 1}",
                       "conditions": [{"type": "Ready", "status": "True"}] * 4}})
        emu.put("httproutes", {"metadata": {"name": name, "namespace": ns}, "spec": {
            "parentRefs": [{"name": "edge", "namespace": "infra"}],
            "hostnames": [f"{name}.example.com"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                       "backendRefs": [{"name": name, "port": 80}]}]}})


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(count: int, changes: int, *, measure_memory: bool) -> dict[str, Any]:
    async with KubeEmulator() as emu:
        fill(emu, count)
        settings = KubeSourceSettings(debounce_s=0.0, max_wait_s=0.0)
        async with client.ApiClient(client.Configuration(host=emu.url)) as api:
            gc.collect()
            if measure_memory:
                tracemalloc.start()
                base = tracemalloc.get_traced_memory()[0]
            source = KubeSource(api, settings)
            updates = source.watch()
            began = time.perf_counter()
            await anext(updates)
            first_ms = (time.perf_counter() - began) * 1000
            out: dict[str, Any] = {"first_ms": first_ms}
            if measure_memory:
                gc.collect()
                out["retained_mib"] = (tracemalloc.get_traced_memory()[0] - base) / 2**20
                tracemalloc.stop()
            latencies = []
            for i in range(changes):
                port = 9000 + i
                began = time.perf_counter()
                emu.put("services", {"metadata": {"name": "app0", "namespace": "ns0"},
                                     "spec": {"selector": {"app": "app0"},
                                              "ports": [{"port": 80, "targetPort": port}]}})
                while True:
                    update = await anext(updates)
                    if ("Service", ("ns0", "app0")) in (update.changed or ()):
                        break
                latencies.append((time.perf_counter() - began) * 1000)
            if latencies:
                out["p50_ms"], out["p99_ms"] = pct(latencies, 0.5), pct(latencies, 0.99)
            await updates.aclose()
    return out


async def lone_after(count: int, changes: int, after_ms: float) -> list[float]:
    """Write → update (ms) of one change ``after_ms`` after the previous update, with the
    controller's coalescing settings."""
    async with KubeEmulator() as emu:
        fill(emu, count)
        settings = KubeSourceSettings(debounce_s=0.02, max_wait_s=0.2)
        async with client.ApiClient(client.Configuration(host=emu.url)) as api:
            updates = KubeSource(api, settings).watch()
            await anext(updates)
            latencies = []
            for i in range(changes):
                await asyncio.sleep(after_ms / 1000)
                began = time.perf_counter()
                emu.put("services", {"metadata": {"name": "app0", "namespace": "ns0"},
                                     "spec": {"selector": {"app": "app0"},
                                              "ports": [{"port": 80, "targetPort": 9000 + i}]}})
                await anext(updates)
                latencies.append((time.perf_counter() - began) * 1000)
            await updates.aclose()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1000, help="objects of each kind")
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--after-ms", type=float, default=10.0,
                        help="the lone change's distance from the previous update")
    args = parser.parse_args()
    ref = reference_ms()
    timing = asyncio.run(run(args.objects, args.changes, measure_memory=False))
    memory = asyncio.run(run(args.objects, 0, measure_memory=True))
    ref = min(ref, reference_ms())
    n = args.objects
    print(f"machine reference (fixed pure-Python workload): {ref:.1f} ms")
    print(f"first snapshot, {n} each of Service/EndpointSlice/Pod/HTTPRoute: "
          f"{timing['first_ms']:.0f} ms ({timing['first_ms'] / ref:.1f}x reference)")
    print(f"API write -> update, p50 {timing['p50_ms']:.2f} ms "
          f"({timing['p50_ms'] / ref:.3f}x), p99 {timing['p99_ms']:.2f} ms "
          f"({timing['p99_ms'] / ref:.3f}x) over {args.changes} writes")
    print(f"memory retained by the source: {memory['retained_mib']:.1f} MiB "
          f"({memory['retained_mib'] * 1024 / (4 * n):.2f} KiB per object)")
    lone = asyncio.run(lone_after(min(n, 100), min(args.changes, 50), args.after_ms))
    print(f"lone change {args.after_ms:.0f} ms after an update (debounce 20 ms) -> update: "
          f"p50 {pct(lone, 0.5):.1f} ms, p99 {pct(lone, 0.99):.1f} ms over {len(lone)} writes")


if __name__ == "__main__":
    main()
