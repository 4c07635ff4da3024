"""Machine-speed reference for the benchmarks: a fixed pure-Python workload, timed in the same run.

Machine speed here varies about 2x from day to day (the same translation measured 21-33 ms one
day and 78-103 ms another), so a figure alone cannot be compared across days. Each benchmark
measures this reference first, prints it, and prints every time also as a ratio to it
(``0.42x ref``): the ratio moves when Podway changes, not when the machine does.

The workload resembles the control plane's own work (small objects, dicts, sorting, string
formatting and parsing) and never changes; if it must, the ratios before and after are not
comparable, so say so in docs/performance.md.

    python bench/speedref.py       # prints the reference alone
"""

from __future__ import annotations

import gc
import json
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any

_WORD = re.compile(r"[a-z]+-(\d+)")


def workload() -> int:
    """Fixed work, about 100 ms on a 2024 laptop core; returns a checksum so nothing is skipped."""
    items: list[dict[str, Any]] = [
        {"name": f"svc-{i}", "port": 8000 + i % 97, "labels": {"app": f"a{i % 31}"}}
        for i in range(20_000)]
    items.sort(key=lambda d: (d["labels"]["app"], d["port"], d["name"]))
    text = json.dumps(items)
    back = json.loads(text)
    total = sum(int(m.group(1)) for d in back if (m := _WORD.match(d["name"])))
    by_app: dict[str, list[int]] = {}
    for d in back:
        by_app.setdefault(d["labels"]["app"], []).append(d["port"])
    return total + sum(len(v) for v in by_app.values())


@dataclass(frozen=True, slots=True)
class Reference:
    seconds: float  # median time of the workload in this run

    def ratio(self, seconds: float) -> str:
        """``seconds`` as a multiple of the reference, e.g. ``0.42x ref``."""
        return f"{seconds / self.seconds:.3g}x ref"

    def describe(self) -> str:
        return (f"machine-speed reference: {self.seconds * 1000:.1f} ms "
                "(fixed pure-Python workload, bench/speedref.py; figures below also as x ref)")

    def check_again(self) -> str:
        """Measure again at the end: if the machine's load changed during the run, the ratios
        are less trustworthy, and this line says by how much."""
        now = measure()
        return (f"machine-speed reference at the end: {now.seconds * 1000:.1f} ms "
                f"({now.seconds / self.seconds:.2f}x the one the ratios use)")


def measure(runs: int = 7) -> Reference:
    """Median of ``runs`` timings after one warm-up, each from a collected heap."""
    workload()
    times = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        workload()
        times.append(time.perf_counter() - start)
    return Reference(statistics.median(times))


def static_envoy(listen_port: int, backend_port: int) -> dict[str, Any]:
    """Bootstrap of the data-plane reference: an Envoy with one static HTTP route to
    127.0.0.1:``backend_port`` on 127.0.0.1:``listen_port``, no xDS. Latency through Podway's
    Envoy is printed as a ratio to latency through this one, measured in the same run."""
    router = {"name": "envoy.filters.http.router", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network."
                 "http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "static", "http_filters": [router],
        "route_config": {"virtual_hosts": [{"name": "any", "domains": ["*"], "routes": [
            {"match": {"prefix": "/"}, "route": {"cluster": "echo"}}]}]}}
    address = {"socket_address": {"address": "127.0.0.1", "port_value": backend_port}}
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {
            "listeners": [{"name": "static", "address": {"socket_address": {
                "address": "127.0.0.1", "port_value": listen_port}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": manager}]}]}],
            "clusters": [{"name": "echo", "type": "STATIC", "load_assignment": {
                "cluster_name": "echo",
                "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}]}}]}}


if __name__ == "__main__":
    print(measure().describe())
