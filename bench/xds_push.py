"""xDS benchmark: build and push N routes to a real Envoy, and time what users feel.

For each size (default 1,000 and 10,000 routes, 10 paths per host, one pool per route):

* build: IR → Envoy resources, cold (``build``) and after one endpoint change (memoised).
* push: ``cache.set`` of the whole config → Envoy's ACK of the route configuration.
* new route: a manifest adding one host is written → first 200 (it was 404), p50/p99 of tries.
* endpoint change: an EndpointSlice file rewritten → Envoy's EDS ACK (pipeline), and
  ``cache.set`` → EDS ACK (push only), p50/p99.
* added latency (once): p50 of sequential keep-alive requests via Envoy minus direct.

Machine speed varies from day to day, so the run first measures a pure-Python reference
(``bench/speedref.py``) and prints every control-plane time also as a ratio to it; the data
plane's reference is a static Envoy (no xDS) measured in the same run. Figures print as they
are measured, with a line before each step.

Targets (issue 3): new route ≤ 100 ms p99 with 1,000 routes; endpoint push ≤ 20 ms; Envoy adds
≤ 0.2 ms p50 on loopback.

    python bench/xds_push.py [--sizes 1000,10000] [--tries 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import statistics
import tempfile
import time
from pathlib import Path
from types import MappingProxyType

from speedref import Reference, measure, static_envoy

from podway.envoy import types
from podway.envoy.config import Builder, build
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.xds.protocol import Ack, Event
from podway.ir import IR, Member
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve
from podway.translate import TranslateOptions

PATHS_PER_HOST = 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def manifests(root: Path, routes: int, echo_port: int) -> None:
    services = []
    for i in range(routes):
        services.append(f"""apiVersion: v1
kind: Service
metadata: {{name: svc-{i}, namespace: bench}}
spec: {{ports: [{{name: http, port: 80, targetPort: {echo_port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc-{i}-x, namespace: bench, labels: {{kubernetes.io/service-name: svc-{i}}}}}
ports: [{{name: http, port: {echo_port}}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
""")
    (root / "services.yaml").write_text("---\n".join(services))
    for chunk in range(0, routes // PATHS_PER_HOST, 100):
        (root / f"ingress-{chunk}.yaml").write_text(ingress(
            f"bench-{chunk}", range(chunk, min(chunk + 100, routes // PATHS_PER_HOST))))


def ingress(name: str, hosts: range, service: str | None = None) -> str:
    rules = []
    for h in hosts:
        paths = "".join(
            f"      - {{path: /app{p}, pathType: Prefix, backend: {{service: "
            f"{{name: {service or f'svc-{h * PATHS_PER_HOST + p}'}, port: {{name: http}}}}}}}}\n"
            for p in range(PATHS_PER_HOST))
        rules.append(f"  - host: h{h}.bench.test\n    http:\n      paths:\n{paths}")
    return (f"apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, "
            f"namespace: bench}}\nspec:\n  ingressClassName: podway\n  rules:\n"
            + "".join(rules))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def status_of(port: int, host: str, path: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                     .encode())
        line = await reader.readline()
        return int(line.split()[1])
    finally:
        writer.close()


class Acks:
    """Timestamps of Envoy's ACKs per type, with a waiter for 'the next ACK of type T'."""

    def __init__(self) -> None:
        self.waiters: list[tuple[str, asyncio.Future[float]]] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, Ack):
            now = time.perf_counter()
            for type_url, future in list(self.waiters):
                if type_url == event.type_url and not future.done():
                    future.set_result(now)
                    self.waiters.remove((type_url, future))

    def next(self, type_url: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters.append((type_url, future))
        return future


class Figures:
    """Prints each figure the moment it is measured (a 10,000-route run takes a while), in ms
    and as a ratio to the machine-speed reference."""

    def __init__(self, ref: Reference) -> None:
        self.ref = ref

    def step(self, text: str) -> None:
        print(f"  .. {text}", flush=True)

    def time(self, name: str, *seconds: float, digits: int = 1) -> None:
        values = " / ".join(f"{s * 1000:.{digits}f}" for s in seconds)
        ratios = " / ".join(self.ref.ratio(s) for s in seconds)
        print(f"  {name:48} {values} ms ({ratios})", flush=True)


async def bench_size(routes: int, tries: int, echo_port: int, out: Figures) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        out.step(f"writing {routes} routes, starting Podway and Envoy")
        manifests(root, routes, echo_port)
        http_port = free_port()
        acks = Acks()
        standalone = Standalone(StandaloneOptions(
            manifests=root, drain_s=0, translate=TranslateOptions(
                address="127.0.0.1", http_port=http_port, https_port=free_port())))
        standalone.event_hooks.append(acks)
        rds_ack = acks.next(types.ROUTE)
        began = time.perf_counter()
        task = asyncio.create_task(standalone.run())
        try:
            state = await standalone.pipeline.wait_for(lambda s: s.generation >= 1)
            engine = await standalone.engine()
            assert engine is not None
            await engine.wait_ready(limit_s=120)
            await asyncio.wait_for(rds_ack, 120)
            out.time("first config served", time.perf_counter() - began, digits=0)
            ir = state.ir
            out.step("building resources")
            _build_times(ir, out)
            out.step("pushing the whole config")
            await _push_time(standalone, acks, ir, out)
            out.step(f"adding {tries} routes, one at a time")
            await _new_route(standalone, root, http_port, tries, out)
            out.step(f"changing endpoints {tries} times")
            await _endpoint_change(standalone, root, acks, ir, tries=tries, echo_port=echo_port,
                                   out=out)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _build_times(ir: IR, out: Figures) -> None:
    cold = []
    for _ in range(3):
        t0 = time.perf_counter()
        build(ir)
        cold.append(time.perf_counter() - t0)
    builder = Builder()
    builder.build(ir)
    name = next(iter(ir.pools))
    moved = IR(listeners=ir.listeners, pools=MappingProxyType({
        **ir.pools, name: _moved(ir.pools[name], 1)}))
    t0 = time.perf_counter()
    builder.build(moved)
    warm = time.perf_counter() - t0
    out.time("build, cold (median of 3)", statistics.median(cold))
    out.time("build, one endpoint changed", warm, digits=2)


def _moved(pool, n: int):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(pool, members=(Member(address=f"127.0.0.{2 + n % 200}", port=1),))


async def _push_time(standalone: Standalone, acks: Acks, ir: IR, out: Figures) -> None:
    """Whole config replaced (every route name changes) → ACK of the new route table."""
    # Re-pushing identical content is a no-op, so push an empty config and then the real one.
    cache = standalone.pipeline.cache
    empty_ack = acks.next(types.LISTENER)
    cache.set(Builder().build(IR()))
    await asyncio.wait_for(empty_ack, 60)
    await asyncio.sleep(0.5)
    resources = Builder().build(ir)
    done = acks.next(types.ROUTE)
    t0 = time.perf_counter()
    cache.set(resources)
    acked = await asyncio.wait_for(done, 120)
    out.time("push whole config → route ACK", acked - t0, digits=0)


async def _new_route(standalone: Standalone, root: Path, port: int, tries: int,
                     out: Figures) -> None:
    times = []
    for i in range(tries):
        host = f"new{i}.bench.test"
        assert await status_of(port, host, "/app0") == 404
        text = ingress(f"new-{i}", range(0), None).replace(
            "  rules:\n", f"  rules:\n  - host: {host}\n    http:\n      paths:\n"
            "      - {path: /app0, pathType: Prefix, backend: {service: "
            "{name: svc-0, port: {name: http}}}}\n")
        t0 = time.perf_counter()
        tmp = root / f".new-{i}.tmp"
        tmp.write_text(text)
        tmp.replace(root / f"new-{i}.yaml")
        for _ in range(10000):
            if await status_of(port, host, "/app0") == 200:
                break
        times.append(time.perf_counter() - t0)
    out.time("new route 404→200 p50 / p99", pct(times, 0.5), pct(times, 0.99), digits=0)


async def _endpoint_change(standalone: Standalone, root: Path, acks: Acks, ir: IR, *,
                           tries: int, echo_port: int, out: Figures) -> None:
    pipeline, push = [], []
    for i in range(tries):
        done = acks.next(types.ENDPOINT)
        t0 = time.perf_counter()
        (root / "eds.yaml").write_text(f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: svc-1-extra, namespace: bench, labels: {{kubernetes.io/service-name: svc-1}}}}
ports: [{{name: http, port: {echo_port}}}]
endpoints: [{{addresses: [127.0.0.{2 + i}], conditions: {{ready: {str(i % 2 == 0).lower()}}}}}]
""")
        pipeline.append(await asyncio.wait_for(done, 10) - t0)
    builder = Builder()
    standalone.pipeline.cache.set(builder.build(ir))
    await asyncio.sleep(0.2)
    name = next(iter(ir.pools))
    for i in range(tries):
        moved = IR(listeners=ir.listeners, pools=MappingProxyType({
            **ir.pools, name: _moved(ir.pools[name], i)}))
        resources = builder.build(moved)
        done = acks.next(types.ENDPOINT)
        t0 = time.perf_counter()
        standalone.pipeline.cache.set(resources)
        push.append(await asyncio.wait_for(done, 10) - t0)
    out.time("endpoint change: file write → EDS ACK p50 / p99", pct(pipeline, 0.5),
             pct(pipeline, 0.99))
    out.time("endpoint change: cache.set → EDS ACK p50 / p99", pct(push, 0.5), pct(push, 0.99))


async def static_envoy_latency(echo_port: int, requests: int) -> list[float]:
    """The data-plane reference: the same requests through an Envoy with a static config."""
    port = free_port()
    engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0,
                                  bootstrap=static_envoy(port, echo_port)))
    task = asyncio.create_task(engine.run(), name="static-envoy")
    try:
        await engine.wait_ready()
        for _ in range(200):  # the listener binds a moment after LIVE
            with contextlib.suppress(OSError):
                if await status_of(port, "static.test", "/app0") == 200:
                    break
            await asyncio.sleep(0.05)
        return await _sequential(port, "static.test", requests)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def added_latency(echo_port: int, requests: int) -> dict[str, str]:
    static = await static_envoy_latency(echo_port, requests)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifests(root, 10, echo_port)
        http_port = free_port()
        standalone = Standalone(StandaloneOptions(
            manifests=root, drain_s=0, translate=TranslateOptions(
                address="127.0.0.1", http_port=http_port, https_port=free_port())))
        task = asyncio.create_task(standalone.run())
        try:
            await standalone.pipeline.wait_for(lambda s: s.generation >= 1)
            engine = await standalone.engine()
            assert engine is not None
            await engine.wait_ready()
            for _ in range(200):  # the listener binds a moment after LIVE
                if await status_of(http_port, "h0.bench.test", "/app0") == 200:
                    break
            direct = await _sequential(echo_port, "h0.bench.test", requests)
            via = await _sequential(http_port, "h0.bench.test", requests)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    reference = pct(static, 0.5)
    return {"direct p50": f"{pct(direct, 0.5) * 1e3:.3f} ms",
            "via static Envoy p50 (data-plane reference)": f"{reference * 1e3:.3f} ms",
            "via Podway's Envoy p50": f"{pct(via, 0.5) * 1e3:.3f} ms "
                                      f"({pct(via, 0.5) / reference:.3g}x static Envoy)",
            "added p50": f"{(pct(via, 0.5) - pct(direct, 0.5)) * 1e3:.3f} ms"}


async def _sequential(port: int, host: str, n: int) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = f"GET /app0 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            times.append(time.perf_counter() - t0)
    finally:
        writer.close()
    return times[n // 10:]  # drop warm-up


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    ref = measure()
    print(ref.describe(), flush=True)
    out = Figures(ref)
    echo_port = free_port()
    started = asyncio.Event()
    echo = asyncio.create_task(serve(EchoOptions(port=echo_port, identity=Identity(name="b")),
                                     started=started))
    await started.wait()
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            print(f"-- {size} routes", flush=True)
            await bench_size(size, args.tries, echo_port, out)
        print("-- added latency (sequential keep-alive HTTP/1.1, loopback; data-plane reference: "
              "the same requests through an Envoy with a static config)", flush=True)
        for key, value in (await added_latency(echo_port, args.requests)).items():
            print(f"  {key:48} {value}")
        print(ref.check_again())
    finally:
        echo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await echo


if __name__ == "__main__":
    asyncio.run(main())
