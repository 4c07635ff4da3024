"""Benchmark: translate 1,000 HTTPRoutes x 3 rules on one Gateway, statuses in the same pass.

Target (issue 4): <= 100 ms for the translation including every route's and listener's status.
Prints the best and median of several runs, and the status computation alone.
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

from podway.model.base import K8sObject
from podway.model.loader import parse_object
from podway.model.snapshot import Snapshot
from podway.translate import translate
from podway.translate.gateway import GatewayTranslation
from podway.translate.options import TranslateOptions

ROUTES = 1000
RUNS = 7


def objects(routes: int = ROUTES) -> list[K8sObject]:
    raw: list[dict[str, object]] = [
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
         "metadata": {"name": "podway"},
         "spec": {"controllerName": "podway.io/gateway-controller"}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
         "metadata": {"name": "gw", "namespace": "infra"},
         "spec": {"gatewayClassName": "podway", "listeners": [
             {"name": "http", "protocol": "HTTP", "port": 80,
              "allowedRoutes": {"namespaces": {"from": "All"}}}]}},
    ]
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for i in range(routes):
        ns = f"team-{i % 50}"
        raw.append({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": f"svc-{i}", "namespace": ns},
                    "spec": {"ports": [{"name": "http", "port": 80}]}})
        raw.append({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": f"route-{i}", "namespace": ns,
                         "creationTimestamp": (start + timedelta(seconds=i)).isoformat()},
            "spec": {
                "parentRefs": [{"name": "gw", "namespace": "infra"}],
                "hostnames": [f"app-{i % 200}.example.com"],
                "rules": [
                    {"matches": [{"path": {"type": "Exact", "value": f"/r{i}/exact"}}],
                     "backendRefs": [{"name": f"svc-{i}", "port": 80}]},
                    {"matches": [{"path": {"type": "PathPrefix", "value": f"/r{i}"},
                                  "headers": [{"name": "x-canary", "value": "1"}]}],
                     "filters": [{"type": "RequestHeaderModifier",
                                  "requestHeaderModifier": {"set": [{"name": "x-r",
                                                                     "value": str(i)}]}}],
                     "backendRefs": [{"name": f"svc-{i}", "port": 80, "weight": 9},
                                     {"name": "missing", "port": 80, "weight": 1}]},
                    {"matches": [{"path": {"type": "PathPrefix", "value": f"/r{i}"},
                                  "method": "GET"}],
                     "backendRefs": [{"name": f"svc-{i}", "port": 80}]},
                ]}})
    out = []
    for item in raw:
        obj, error = parse_object(item)
        assert obj is not None, error
        out.append(obj)
    return out


def timed(fn: object, runs: int = RUNS) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append((time.perf_counter() - t0) * 1000)
    return times


def main() -> int:
    snapshot = Snapshot.of_objects(objects())
    result = translate(snapshot)
    routes = sum(1 for ref in result.statuses if ref.kind == "HTTPRoute")
    vhosts = sum(len(lst.virtual_hosts) for lst in result.ir.listeners)
    ir_routes = sum(len(v.routes) for lst in result.ir.listeners for v in lst.virtual_hosts)
    full = timed(lambda: translate(snapshot))

    def statuses_only() -> None:
        gw = GatewayTranslation(snapshot=snapshot, opts=TranslateOptions())
        gw.run()
        t0 = time.perf_counter()
        gw.statuses()
        status_ms.append((time.perf_counter() - t0) * 1000)

    status_ms: list[float] = []
    timed(statuses_only)
    print(f"{ROUTES} HTTPRoutes x 3 rules -> {vhosts} virtual hosts, {ir_routes} IR routes, "
          f"{routes} route statuses")
    print(f"translate (IR + statuses): best {min(full):.1f} ms, median "
          f"{statistics.median(full):.1f} ms (target <= 100 ms)")
    print(f"  of which statuses: best {min(status_ms):.1f} ms, median "
          f"{statistics.median(status_ms):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
