"""Translation benchmark: synthetic clusters of N Ingress paths, 3 endpoints each.

Prints, for each size: full translation time (median of several runs), peak memory allocated
during one translation (tracemalloc), and the time to re-translate after one EndpointSlice
changes (IncrementalTranslator, p50/p99). Targets: 1,000 paths ≤ 50 ms, 10,000 ≤ 500 ms; the
endpoint update must not grow with the cluster.

Then Gateway API: N HTTPRoutes x 3 rules on one Gateway, translated with every route's and
listener's status in the same pass. Target: 1,000 routes ≤ 100 ms.

Then one route change in the world of ``bench/convergence.py`` (N Services + HTTPRoutes on one
listener): translate, build and cache set as the pipeline does them, p50/p99. Target (issue 11):
≤ 20 ms p50 at 10,000 routes, flat in N.

Every time is also printed as a ratio to the machine-speed reference measured first
(``bench/speedref.py``), so runs on different days compare.

    python bench/translate.py [--sizes 1000,10000] [--runs 5] [--gateway-routes 1000]
                              [--route-changes 1000,10000] [--tries 20]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from typing import Any

from speedref import Reference, measure

from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.model import EndpointSlice, Ingress, K8sObject, Service, Snapshot
from podway.model.loader import parse_object
from podway.model.snapshot import Key
from podway.translate import IncrementalTranslator, Result, TranslateOptions, translate
from podway.translate.core.ports import PortTable
from podway.translate.gateway import GatewayTranslation

PATHS_PER_HOST = 10
OPTS = TranslateOptions(address="198.18.0.1")


def ip(n: int) -> str:
    return f"198.18.{(n >> 8) & 255}.{n & 255}"


def make_slice(i: int, generation: int = 0) -> EndpointSlice:
    return EndpointSlice.model_validate({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"svc-{i}-x", "namespace": "bench",
                     "labels": {"kubernetes.io/service-name": f"svc-{i}"}},
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [{"addresses": [ip(3 * i + k + generation)],
                       "conditions": {"ready": True}} for k in range(3)]})


def cluster(paths: int) -> Snapshot:
    objects: list[K8sObject] = []
    for h in range(paths // PATHS_PER_HOST):
        rule_paths: list[dict[str, Any]] = []
        for p in range(PATHS_PER_HOST):
            i = h * PATHS_PER_HOST + p
            rule_paths.append({"path": f"/app{p}/v{i}", "pathType": "Prefix" if p % 3 else "Exact",
                               "backend": {"service": {"name": f"svc-{i}",
                                                       "port": {"name": "http"}}}})
        objects.append(Ingress.model_validate({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": f"ing-{h}", "namespace": "bench"},
            "spec": {"ingressClassName": "podway",
                     "rules": [{"host": f"host{h}.example.com", "http": {"paths": rule_paths}}]}}))
    for i in range(paths):
        objects.append(Service.model_validate({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"svc-{i}", "namespace": "bench"},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
        objects.append(make_slice(i))
    return Snapshot.of_objects(objects)


def ms(seconds: float, ref: Reference) -> str:
    return f"{seconds * 1000:8.2f} ms ({ref.ratio(seconds)})"


def timed_translations(snapshot: Snapshot, runs: int) -> tuple[Result, list[float]]:
    """Translate ``runs`` times from a collected heap; the last result and every duration."""
    times = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        result = translate(snapshot, OPTS)
        times.append(time.perf_counter() - start)
    return result, times


def bench(paths: int, runs: int, ref: Reference) -> None:
    snapshot = cluster(paths)
    result, times = timed_translations(snapshot, runs)
    routes = sum(len(v.routes) for lst in result.ir.listeners for v in lst.virtual_hosts)
    members = sum(len(p.members) for p in result.ir.pools.values())
    assert routes == paths, routes

    gc.collect()
    tracemalloc.start()
    translate(snapshot, OPTS)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    inc = IncrementalTranslator(OPTS)
    inc.update(snapshot)
    updates = []
    for n in range(200):
        changed = make_slice(n % paths, generation=n + 1)
        snapshot = snapshot.replace(EndpointSlice.KIND, {changed.key: changed})
        start = time.perf_counter()
        inc.update(snapshot, changed=[(EndpointSlice.KIND, changed.key)])
        updates.append(time.perf_counter() - start)
    updates.sort()
    p50, p99 = statistics.median(updates), updates[int(len(updates) * 0.99) - 1]

    # A structural change: one Ingress edited (a label), back and forth.
    ingress = next(iter(snapshot.kind(Ingress).values()))
    edited = ingress.model_copy(update={"metadata": ingress.metadata.model_copy(
        update={"labels": {"edited": "yes"}})})
    structural = []
    for n in range(20):
        snapshot = snapshot.replace(Ingress.KIND, {ingress.key: edited if n % 2 == 0 else ingress})
        start = time.perf_counter()
        inc.update(snapshot, changed=[(Ingress.KIND, ingress.key)])
        structural.append(time.perf_counter() - start)
    print(f"{paths:>6} paths ({routes} routes, {len(result.ir.pools)} pools, {members} members)")
    print(f"    full translation   median {ms(statistics.median(times), ref)}  "
          f"min {ms(min(times), ref)}")
    print(f"    peak memory        {peak / 2**20:8.1f} MiB (allocated during one translation)")
    print(f"    endpoint update    p50 {ms(p50, ref)}  p99 {ms(p99, ref)}  "
          "(one EndpointSlice changed)")
    print(f"    ingress update     p50 {ms(statistics.median(structural), ref)}  max "
          f"{ms(max(structural), ref)}  (one Ingress changed: structure re-run, parts reused)")


GW = "gateway.networking.k8s.io/v1"


def gateway_cluster(routes: int) -> Snapshot:
    """One Gateway; N HTTPRoutes over 200 hostnames, each with an Exact rule, a PathPrefix +
    header rule with a header filter and a 9:1 split whose small share is unresolvable (500),
    and a PathPrefix + method rule; one Service per route, 50 namespaces."""
    raw: list[dict[str, Any]] = [
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "podway"},
         "spec": {"controllerName": "podway.io/gateway-controller"}},
        {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "infra"},
         "spec": {"gatewayClassName": "podway", "listeners": [
             {"name": "http", "protocol": "HTTP", "port": 80,
              "allowedRoutes": {"namespaces": {"from": "All"}}}]}}]
    for i in range(routes):
        ns, svc = f"team-{i % 50}", {"name": f"svc-{i}", "port": 80}
        raw.append({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": f"svc-{i}", "namespace": ns},
                    "spec": {"ports": [{"name": "http", "port": 80}]}})
        raw.append({"apiVersion": GW, "kind": "HTTPRoute", "metadata": {
            "name": f"route-{i}", "namespace": ns,
            "creationTimestamp": f"2024-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"},
            "spec": {"parentRefs": [{"name": "gw", "namespace": "infra"}],
                     "hostnames": [f"app-{i % 200}.example.com"], "rules": [
                {"matches": [{"path": {"type": "Exact", "value": f"/r{i}/exact"}}],
                 "backendRefs": [svc]},
                {"matches": [{"path": {"type": "PathPrefix", "value": f"/r{i}"},
                              "headers": [{"name": "x-canary", "value": "1"}]}],
                 "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                     "set": [{"name": "x-route", "value": str(i)}]}}],
                 "backendRefs": [{**svc, "weight": 9}, {"name": "gone", "port": 80, "weight": 1}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": f"/r{i}"},
                              "method": "GET"}], "backendRefs": [svc]}]}})
    objects = []
    for item in raw:
        obj, error = parse_object(item)
        assert obj is not None, error
        objects.append(obj)
    return Snapshot.of_objects(objects)


def bench_gateway(routes: int, runs: int, ref: Reference) -> None:
    snapshot = gateway_cluster(routes)
    result, times = timed_translations(snapshot, runs)
    statuses = sum(1 for ref in result.statuses if ref.kind == "HTTPRoute")
    ir_routes = sum(len(v.routes) for lst in result.ir.listeners for v in lst.virtual_hosts)
    assert statuses == routes, statuses
    assert ir_routes == 3 * routes, ir_routes
    status_times = []
    for _ in range(runs):
        gw = GatewayTranslation(snapshot=snapshot, opts=OPTS)
        gw.build(PortTable())
        start = time.perf_counter()
        gw.conclude()
        status_times.append(time.perf_counter() - start)
    print(f"{routes:>6} HTTPRoutes x 3 rules ({ir_routes} IR routes, {statuses} route statuses)")
    print(f"    full translation   median {ms(statistics.median(times), ref)}  "
          f"min {ms(min(times), ref)}  (IR + every status)")
    print(f"    of which statuses  median {ms(statistics.median(status_times), ref)}")


def convergence_cluster(routes: int, *, gateway_port: int = 8080, target_port: int = 9000,
                        address: str | None = None) -> tuple[list[K8sObject], Snapshot]:
    """The world of ``bench/convergence.py``: one Gateway (HTTP listener on ``gateway_port``),
    N Services with one EndpointSlice each (``address``, else one address per Service, at
    ``target_port``) and N HTTPRoutes (host ``r<i>.bench.test`` → ``svc-<i>``)."""
    raw: list[dict[str, Any]] = [
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "podway"},
         "spec": {"controllerName": "podway.io/gateway-controller"}},
        {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "edge", "namespace": "bench"},
         "spec": {"gatewayClassName": "podway", "listeners": [
             {"name": "http", "protocol": "HTTP", "port": gateway_port,
              "allowedRoutes": {"namespaces": {"from": "All"}}}]}}]
    for i in range(routes):
        raw.append(_service(i, target_port))
        raw.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {
            "name": f"svc-{i}-1", "namespace": "bench",
            "labels": {"kubernetes.io/service-name": f"svc-{i}"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": target_port}],
            "endpoints": [{"addresses": [address or ip(i)], "conditions": {"ready": True}}]})
        raw.append(_http_route(i, f"r{i}.bench.test"))
    objects = [_object(item) for item in raw]
    return objects, Snapshot.of_objects(objects)


def _service(i: int, target_port: int = 9000) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"svc-{i}", "namespace": "bench"},
            "spec": {"selector": {"app": f"a{i}"},
                     "ports": [{"name": "http", "port": 80, "targetPort": target_port}]}}


def _http_route(i: int, host: str) -> dict[str, Any]:
    return {"apiVersion": GW, "kind": "HTTPRoute",
            "metadata": {"name": host.split(".", maxsplit=1)[0], "namespace": "bench"},
            "spec": {"parentRefs": [{"name": "edge"}], "hostnames": [host],
                     "rules": [{"backendRefs": [{"name": f"svc-{i}", "port": 80}]}]}}


def _object(item: dict[str, Any]) -> K8sObject:
    obj, error = parse_object(item)
    assert obj is not None, error
    return obj


def bench_route_changes(routes: int, tries: int, ref: Reference) -> None:
    """One HTTPRoute added (to an existing Service; to a new Service: a new pool) and deleted,
    one Service added,
    through the pipeline's own steps: ``IncrementalTranslator.update``, ``Builder.build`` with
    the result's ``IRChange``, ``Cache.set`` with the builder's hint. The target (issue 11,
    10,000 routes): translate + build + cache ≤ 20 ms p50, flat in the number of routes."""
    _, snapshot = convergence_cluster(routes)
    inc, builder, cache = IncrementalTranslator(OPTS), Builder(), Cache()
    cache.set(builder.build(inc.update(snapshot).ir))
    stages: dict[str, dict[str, list[float]]] = {}

    def step(label: str, changes: dict[str, dict[Key, K8sObject | None]]) -> None:
        nonlocal snapshot
        keys = []
        for kind, objs in changes.items():
            snapshot = snapshot.replace(kind, objs)
            keys.extend((kind, key) for key in objs)
        t0 = time.perf_counter()
        result = inc.update(snapshot, keys)
        t1 = time.perf_counter()
        resources = builder.build(result.ir, result.change)
        t2 = time.perf_counter()
        cache.set(resources, hint=builder.hint)
        t3 = time.perf_counter()
        got = stages.setdefault(label, {"translate": [], "build": [], "cache": [], "total": []})
        for name, seconds in (("translate", t1 - t0), ("build", t2 - t1), ("cache", t3 - t2),
                              ("total", t3 - t0)):
            got[name].append(seconds)

    for n in range(tries):
        host = f"new{n}.bench.test"
        added = _object(_http_route(routes - 1 - n, host))
        step("new route, existing Service", {"HTTPRoute": {added.key: added}})
        step("route deleted", {"HTTPRoute": {added.key: None}})
        service = _object(_service(routes + n))
        step("new Service (no route yet)", {"Service": {service.key: service}})
        fresh = _object(_http_route(routes + n, f"fresh{n}.bench.test"))
        step("new route, new Service (pool)", {"HTTPRoute": {fresh.key: fresh}})
    print(f"{routes:>6} HTTPRoutes on one Gateway listener: one route changed, {tries} tries")
    for label, got in stages.items():
        print(f"    {label:<30} " + "  ".join(
            f"{name} {_p(got[name], 0.5)}/{_p(got[name], 0.99)}"
            for name in ("translate", "build", "cache")) +
            f"  total p50 {ms(statistics.median(got['total']), ref)}")


def _p(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--gateway-routes", default="1000")
    parser.add_argument("--route-changes", default="1000,10000",
                        help="sizes for the one-route-changed bench (empty: skip)")
    parser.add_argument("--tries", type=int, default=20)
    args = parser.parse_args()
    ref = measure()
    print(ref.describe())
    for size in (int(s) for s in args.sizes.split(",") if s):
        bench(size, args.runs, ref)
    for size in (int(s) for s in args.gateway_routes.split(",") if s):
        bench_gateway(size, args.runs, ref)
    for size in (int(s) for s in args.route_changes.split(",") if s):
        bench_route_changes(size, args.tries, ref)
    print(ref.check_again())


if __name__ == "__main__":
    main()
