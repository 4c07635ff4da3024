"""Cold start of the controller: the API emulator already holds N routes; controller and Envoy
start together; time to every route served, with the stage split (issue 24).

The emulator runs in a child process, filled as ``bench/convergence.py`` fills it (one
GatewayClass, one Gateway with an HTTP listener, N HTTPRoutes ``r<i>.bench.test`` → Service
``svc-<i>``, N Services + EndpointSlices), the members one local nginx worker (as
``bench/cold_start.py``). The controller runs in this process as ``podway controller`` runs it
(events written, ``GcPolicy()``), on a fixed xDS port, so a real Envoy (``Engine``, delta ADS)
is started at the same moment. Stamped since that start:

* first state: the initial LISTs and their parse, the translation, build and cache set (the
  last three also as their own durations: the rest of "first state" is listing and parsing);
* Envoy ready, routes ACKed (the route tables of the first state), first 200 and last 200
  (the last route, polled once the tables are ACKed; a route whose member has not passed its
  first check yet answers 503, so this includes Envoy's first round of checks);
* first status pass written (the writer's first call that wrote, from the start) and how many
  PATCHes it sent; the Events the controller wrote by the time the last route answered.
* the xDS timeline: per type, Envoy's first request, the server's first response and Envoy's
  first ACK, each with Envoy's CPU seconds by then (where Envoy's time goes between the
  stages); per type, requests, subscribed names, responses and resources sent; how many ADS
  streams Envoy opened (more than one: it lost the stream and got everything again) and NACKs.

Envoy gets the initial fetch timeout ``podway engine`` gives it (``ENGINE_FETCH_TIMEOUT_S``:
it waits for the first clusters and listeners) unless ``--initial-fetch-timeout`` says
otherwise (15: Envoy's own default, as the figures before 12/2026 were taken).

Also the CPU seconds, from the start to the last 200, of this process (the controller; the
bench's own pollers are a few requests), of the emulator and of Envoy: on one shared machine
they compete, and a real API server does the emulator's work in Go.

    python bench/controller_cold_start.py [--routes 10000] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

sys.path.insert(0, str(Path(__file__).parent))
from cold_start import nginx_member, until_200
from convergence import start_emulator
from dataplane import cpu_seconds
from speedref import Reference, measure
from xds_push import Acks, free_port

import podway.programs.controller.events as events_module
from podway.envoy import types
from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import ENGINE_FETCH_TIMEOUT_S, BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.protocol import Ack, Nack
from podway.kube.client import without_env_lookups
from podway.pipeline import State
from podway.programs.controller.main import Controller, ControllerOptions
from podway.programs.gc_policy import GcPolicy
from podway.translate import TranslateOptions


class Stamps:
    """Seconds since ``began`` of each stage, as it ends."""

    def __init__(self) -> None:
        self.began = time.perf_counter()
        self.at: dict[str, float] = {}
        self.counts: dict[str, float] = {}
        self.pid = 0  # Envoy's, once known: its CPU seconds so far go with each xDS stamp
        self.cpu: dict[str, float] = {}

    def stamp(self, name: str, when: float | None = None) -> None:
        if name not in self.at and self.pid:
            self.cpu[name] = cpu_seconds([self.pid])
        self.at.setdefault(name, (when if when is not None else time.perf_counter())
                           - self.began)


def time_first_pass(controller: Controller, stamps: Stamps) -> asyncio.Event:
    """Stamps the first status pass that wrote; the event is set then."""
    done = asyncio.Event()
    writer = controller.status
    assert writer is not None
    original = writer.write

    async def timed(state: State) -> int:
        written = await original(state)
        if written and "status pass written" not in stamps.at:
            stamps.stamp("status pass written")
            stamps.counts["status PATCHes"] = written
            done.set()
        return written

    writer.write = timed  # type: ignore[method-assign]
    return done


@contextlib.contextmanager
def counting_events() -> Iterator[list[int]]:
    """Events the controller records (one item per ``EventRecorder.record`` call: its count)."""
    recorded: list[int] = []
    original = events_module.EventRecorder.record

    async def counted(self: Any, due: Any) -> Any:
        recorded.append(len(due))
        return await original(self, due)

    events_module.EventRecorder.record = counted  # type: ignore[method-assign]
    try:
        yield recorded
    finally:
        events_module.EventRecorder.record = original  # type: ignore[method-assign]


async def one_run(routes: int, echo_port: int, fetch_timeout_s: float | None = None
                  ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    gateway_port, xds_port = free_port(), free_port()
    child = await start_emulator(routes, echo_port, gateway_port)
    api: client.ApiClient | None = None
    tasks: list[asyncio.Task[None]] = []
    try:
        assert child.stdout is not None
        url = (await child.stdout.readline()).decode().strip()
        api = client.ApiClient(client.Configuration(host=url))
        without_env_lookups(api)
        controller = Controller(ControllerOptions(
            translate=TranslateOptions(address="127.0.0.1"), xds_address=f"127.0.0.1:{xds_port}",
            xds_unauthenticated=True, lb_address="127.0.0.1", gc=GcPolicy()), api=api)
        engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
            BootstrapOptions(node_id="bench", xds=f"127.0.0.1:{xds_port}", delta=True,
                             initial_fetch_timeout_s=fetch_timeout_s))))
        stamps = Stamps()
        with counting_events() as recorded, counting_xds(stamps) as xds:
            times, other = await measured(controller, engine, tasks, child.pid, recorded,
                                          stamps=stamps, routes=routes, port=gateway_port)
            return (times, {**other, **{f"xDS {k}": v for k, v in sorted(xds.items())}},
                    stamps.cpu)
    finally:
        for task in reversed(tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if api is not None:
            await api.close()
        if child.stdin is not None:
            child.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(child.wait(), 30)
        if child.returncode is None:
            child.kill()
            await child.wait()


async def measured(controller: Controller, engine: Engine, tasks: list[asyncio.Task[None]],
                   emulator: int, recorded: list[int], *, stamps: Stamps, routes: int,
                   port: int) -> tuple[dict[str, float], dict[str, float]]:
    """Start both (their tasks go to ``tasks``) and stamp every stage."""
    acks = Acks()
    controller.event_hooks.append(acks)
    controller.event_hooks.append(lambda event: stamp_answer(stamps, event))
    cpu0, emu0 = time.process_time(), cpu_seconds([emulator])
    stamps.began = time.perf_counter()
    routes_acked = acks.next(types.ROUTE)
    tasks.append(asyncio.create_task(controller.run()))
    tasks.append(asyncio.create_task(engine.run()))
    await engine.wait_started()
    stamps.pid = engine.pid or 0
    await controller.started.wait()
    first_pass = time_first_pass(controller, stamps)
    assert controller.pipeline is not None
    state = await controller.pipeline.wait_for(lambda s: s.generation >= 1)
    stamps.stamp("first state")
    await engine.wait_ready(limit_s=600)
    stamps.stamp("Envoy ready")
    stamps.stamp("routes ACKed", await asyncio.wait_for(routes_acked, 600))
    stamps.stamp("first 200", await until_200(port, "r0.bench.test", "/", 600))
    stamps.stamp("last 200", await until_200(port, f"r{routes - 1}.bench.test", "/", 600))
    cpu = {"controller CPU": time.process_time() - cpu0,
           "emulator CPU": cpu_seconds([emulator]) - emu0,
           "Envoy CPU": cpu_seconds([engine.pid]) if engine.pid else -1.0}
    stamps.counts["Events at last 200"] = sum(recorded)
    if engine.pid:
        stamps.counts["fetch timeouts"] = fetch_timeouts_of(engine.pid)
    if engine.admin_address:
        stamps.counts.update(await failing_checks(engine.admin_address))
    await asyncio.wait_for(first_pass.wait(), 600)
    timings = state.timings
    out = dict(stamps.at)
    out.update({"translate": timings.translate_ms / 1000, "build": timings.build_ms / 1000,
                "cache set": timings.cache_ms / 1000})
    out["list + parse"] = out["first state"] - out["translate"] - out["build"] - out["cache set"]
    return out, {**cpu, **stamps.counts}


def stamp_answer(stamps: Stamps, event: Any) -> None:
    """Each type's first ACK ("<type> ACKed"); NACKs counted."""
    kind = getattr(event, "type_url", "").rsplit(".", 1)[-1]
    if isinstance(event, Ack):
        stamps.stamp(f"{kind} ACKed")
    elif isinstance(event, Nack):
        stamps.counts["NACKs"] = stamps.counts.get("NACKs", 0) + 1


async def failing_checks(address: str) -> dict[str, float]:
    """Members Envoy has failing their active check right after the last 200, and of those
    whose last check timed out (a main thread too busy to read the answer in time)."""
    _, text = await admin.request(address, "/clusters", limit_s=60)
    flags = [line.rsplit("::", 1)[-1] for line in text.splitlines() if "::health_flags::" in line]
    return {"members failing checks": sum("failed_active_hc" in f for f in flags),
            "... of which timed out": sum("active_hc_timeout" in f for f in flags)}


def fetch_timeouts_of(pid: int) -> int:
    """Envoy's "initial fetch timed out" warnings so far, from its log (its stderr)."""
    log = Path(os.readlink(f"/proc/{pid}/fd/2"))
    return log.read_text(errors="replace").count("initial fetch timed out")


@contextlib.contextmanager
def counting_xds(stamps: Stamps) -> Iterator[dict[str, float]]:
    """Per type: delta requests Envoy sent, names they subscribed, responses and resources the
    server sent (route tables sent twice, or a response per name, show here); the streams
    Envoy opened (more than one: it reconnected and got everything again). Stamped: each
    type's first request ("<type> asked") and first response ("<type> sent")."""
    counts: dict[str, float] = {}
    init = DeltaStream.__init__
    on_request, on_change = DeltaStream.on_request, DeltaStream.on_change

    def add(key: str, n: int) -> None:
        counts[key] = counts.get(key, 0) + n

    def opened(self: DeltaStream, *args: Any, **kwargs: Any) -> None:
        add("streams", 1)
        init(self, *args, **kwargs)

    def requested(self: DeltaStream, request: Any) -> Any:
        kind = request.type_url.rsplit(".", 1)[-1]
        stamps.stamp(f"{kind} asked")
        add(f"{kind} requests", 1)
        add(f"{kind} subscribed", len(request.resource_names_subscribe))
        return on_request(self, request)

    def changed(self: DeltaStream) -> Any:
        responses = on_change(self)
        for response in responses:
            kind = response.type_url.rsplit(".", 1)[-1]
            stamps.stamp(f"{kind} sent")
            add(f"{kind} responses", 1)
            add(f"{kind} sent", len(response.resources))
        return responses

    DeltaStream.__init__ = opened  # type: ignore[method-assign]
    DeltaStream.on_request = requested  # type: ignore[method-assign]
    DeltaStream.on_change = changed  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        DeltaStream.__init__ = init  # type: ignore[method-assign]
        DeltaStream.on_request, DeltaStream.on_change = on_request, on_change  # type: ignore[method-assign]


ORDER = ("list + parse", "translate", "build", "cache set", "first state", "Envoy ready",
         "routes ACKed", "first 200", "last 200", "status pass written")
STAGES = ("list + parse", "translate", "build", "cache set")


async def main_async(args: argparse.Namespace, ref: Reference) -> None:
    echo_port = free_port()
    with nginx_member(echo_port):
        for run in range(args.runs):
            times, other, cpu = await one_run(args.routes, echo_port, args.initial_fetch_timeout)
            print(f"run {run + 1}: {args.routes} HTTPRoutes + Services + EndpointSlices in the "
                  "emulator; seconds since controller + Envoy start (stage durations for list "
                  "+ parse, translate, build and cache set)", flush=True)
            for name in ORDER:
                if name in times:
                    print(f"  {name:<20} {times[name]:8.2f} s  ({ref.ratio(times[name])})")
            print("  xDS, since the start (Envoy's CPU seconds then): " + ", ".join(
                f"{name} {at:.2f}" + (f" ({cpu[name]:.2f})" if name in cpu else "")
                for name, at in sorted(times.items(), key=lambda i: i[1])
                if name not in ORDER and name not in STAGES), flush=True)
            for name, value in other.items():
                unit = " s" if "CPU" in name else ""
                print(f"  {name:<20} {value:8.2f}{unit}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--initial-fetch-timeout", type=float, default=ENGINE_FETCH_TIMEOUT_S,
                        help="Envoy's initial fetch timeout of clusters and listeners, s "
                             "(default: podway engine's; 15 is Envoy's own default)")
    args = parser.parse_args()
    ref = measure()
    print(ref.describe(), "(machine shared with other engineers: compare within one run)")
    asyncio.run(main_async(args, ref))
    print(ref.check_again())


if __name__ == "__main__":
    main()
