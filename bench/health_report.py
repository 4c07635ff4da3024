"""Benchmark of one look of the engine's member health reporter, and of the controller's judging.

The reporter (``podway.envoy.engine.health_report``) reads Envoy's whole ``/clusters``
every ``--health-report-s`` and sends what changed; the readiness gate judges every gated pod
on each change. This measures, for a synthetic ``/clusters`` answer shaped like Envoy's (every
line a real Envoy prints per pool and host) of P pools x M members: its size, ``parse``, ``diff``
and ``encode`` of one changed host (the cost of a look when one member flipped), and
``judge`` over every pod against 3 engines' views. Figures are also printed as a ratio to the
machine-speed reference (``bench/speedref.py``).

    .venv/bin/python bench/health_report.py [--pools 4000] [--members 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from speedref import Reference, measure

from podway.engines.member_health import Health, HostState, Message, diff, encode
from podway.envoy.engine.health_report import parse
from podway.programs.controller.readiness_judge import judge

_HOST_STATS = ("cx_active", "cx_connect_fail", "cx_total", "rq_active", "rq_error",
               "rq_pending_active", "rq_success", "rq_timeout", "rq_total")
_HOST_TAIL = ("weight::1", "region::", "zone::", "sub_zone::", "canary::false", "priority::0",
              "success_rate::-1", "local_origin_success_rate::-1")


def clusters_body(pools: int, members: int) -> str:
    """An answer like Envoy's text ``/clusters``: every line Envoy 1.3x prints per cluster and
    per host (measured on a real one), the health flags among them."""
    lines = []
    for p in range(pools):
        name = f"pool/default/svc-{p}/80"
        lines += [f"{name}::observability_name::{name}",
                  *(f"{name}::{prio}::{limit}" for prio in ("default_priority", "high_priority")
                    for limit in ("max_connections::1024", "max_pending_requests::1024",
                                  "max_requests::1024", "max_retries::3")),
                  f"{name}::added_via_api::true", f"{name}::eds_service_name::{name}"]
        for m in range(members):
            n = p * members + m
            host = f"{name}::198.18.{n // 250 % 250}.{n % 250 + 1}:8080"
            lines += [f"{host}::{stat}::0" for stat in _HOST_STATS]
            lines += [f"{host}::hostname::", f"{host}::health_flags::healthy"]
            lines += [f"{host}::{tail}" for tail in _HOST_TAIL]
    return "\n".join(lines) + "\n"


def timed(run: Callable[[], Any], runs: int = 5) -> float:
    run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=4000)
    parser.add_argument("--members", type=int, default=3)
    args = parser.parse_args()
    ref: Reference = measure()
    print(ref.describe())
    body = clusters_body(args.pools, args.members)
    view = parse(body)
    hosts = len(view)
    print(f"/clusters answer: {args.pools} pools x {args.members} members = {hosts} hosts, "
          f"{len(body) / 1e6:.1f} MB")
    seconds = timed(lambda: parse(body))
    print(f"parse (one look, in a worker thread): {seconds * 1000:.1f} ms ({ref.ratio(seconds)})")
    key = next(iter(view))
    after = dict(view)
    after[key] = HostState(Health.UNHEALTHY, "failed active health check")
    changed, removed = diff(view, after)
    seconds = timed(lambda: diff(view, after))
    message = encode(Message(node="edge-1", full=False, hosts=changed, removed=removed))
    print(f"diff of two looks, one host changed: {seconds * 1000:.1f} ms "
          f"({ref.ratio(seconds)}); the message sent: {len(message)} bytes")
    full = encode(Message(node="edge-1", full=True, hosts=view))
    print(f"the full view (first message of a stream): {len(full) / 1e6:.2f} MB")
    engines = ("edge-1", "edge-2", "edge-3")
    pods = [((c, a),) for c, a in view]

    def judge_all() -> None:
        for members in pods:
            judge(members, engines, lambda _: view)

    seconds = timed(judge_all)
    print(f"judge {len(pods)} gated pods against {len(engines)} engines: "
          f"{seconds * 1000:.1f} ms ({ref.ratio(seconds)})")
    print(ref.check_again())


if __name__ == "__main__":
    main()
