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
bench's own pollers are a few requests), of the emulator, of Envoy and of the members' nginx
(each first check is a connection and a request it answers): on one shared machine they
compete, and a real API server does the emulator's work in Go, on other machines than the
members'.

* Envoy's main thread: the longest wait, per type, from a response sent to Envoy's answer
  (Envoy answers a response once it has applied it, on the thread that also runs the active
  health checks), and its watchdog's misses (the thread did not come round for 200 ms) and
  mega misses (1 s) by the last 200.
* with ``--check-events``, Envoy's health-check event log (a file sink on every pool's check,
  failures always logged): checks that timed out, other failed checks, members that passed
  their first check, by the last 200 (it costs Envoy a little per failure: off by default).

``--variants before,now`` runs each round once per variant, interleaved: ``now`` as the
controller runs; ``before`` as it ran before 12/2026 (the first state's clusters and load
assignments sent with its listeners and routes, ``Pipeline(clusters_first=False)``; the first
status pass not held until Envoy is served, ``first_pass``; the first list's objects shared
before the first update, ``sources.kube.SHARE_LATER_OVER``); ``no-clusters-first``,
``no-hold`` and ``no-share-later``: one of the three only.

``--batch 0,500`` runs each round once per bound of resources per delta response (0: no bound,
one response per type as before 12/2026; the server's is ``DeltaStream.most_per_response``),
interleaved, so the two are compared side by side.

    python bench/controller_cold_start.py [--routes 10000] [--runs 1] [--batch 0,500]
        [--variants before,now] [--check-events]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

sys.path.insert(0, str(Path(__file__).parent))
from cold_start import nginx_member, until_200
from convergence import start_emulator
from dataplane import cpu_seconds, tree
from speedref import Reference, measure
from statuses import stop
from xds_push import Acks, free_port

import podway.envoy.config.clusters as clusters_module
import podway.programs.controller.events as events_module
import podway.sources.kube as kube_source
from podway.envoy import types
from podway.envoy.config.common import pack
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
        self.last: dict[str, float] = {}  # each type's latest ACK so far

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


@contextlib.contextmanager
def bounded(batch: int) -> Iterator[None]:
    """The delta streams' bound of resources per response (0: none) for this round."""
    saved = DeltaStream.most_per_response
    DeltaStream.most_per_response = batch or sys.maxsize
    try:
        yield
    finally:
        DeltaStream.most_per_response = saved


@contextlib.contextmanager
def check_events(path: Path | None) -> Iterator[None]:
    """Every pool's active check logs its events to ``path`` (failures always), if given."""
    if path is None:
        yield
        return
    from envoy.extensions.health_check.event_sinks.file.v3 import file_pb2

    original = clusters_module._health_check
    sink = pack(file_pb2.HealthCheckEventFileSink(event_log_path=str(path)))

    def logged(*args: Any, **kwargs: Any) -> Any:
        check = original(*args, **kwargs)
        check.event_logger.add(name="envoy.health_check.event_sink.file",
                               typed_config=sink)
        check.always_log_health_check_failures = True
        return check

    clusters_module._health_check = logged
    try:
        yield
    finally:
        clusters_module._health_check = original


def events_of(path: Path) -> dict[str, float]:
    """Checks timed out, other failed checks and first passes in an event log so far."""
    counts = {"checks timed out": 0.0, "checks failed otherwise": 0.0,
              "members passed a first check": 0.0}
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line.replace("_", "").lower())  # camelCase or snake_case
                failure = event.get("healthcheckfailureevent") or event.get(
                    "ejectunhealthyevent")
                if failure is not None:
                    timeout = failure.get("failuretype") == "networktimeout"
                    counts["checks timed out" if timeout else "checks failed otherwise"] += 1
                elif (event.get("addhealthyevent") or {}).get("firstcheck"):
                    counts["members passed a first check"] += 1
    return counts


async def one_run(routes: int, echo_port: int, fetch_timeout_s: float | None = None, *,
                  batch: int = 0, events: Path | None = None, variant: str = "now",
                  members: int = 0
                  ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    with bounded(batch), check_events(events), sharing(variant):
        return await _one_run(routes, echo_port, fetch_timeout_s, events, variant,
                              members=members)


@contextlib.contextmanager
def sharing(variant: str) -> Iterator[None]:
    """The first list's objects shared before the first update (``before``,
    ``no-share-later``), else after it."""
    saved = kube_source.SHARE_LATER_OVER
    if variant in ("before", "no-share-later"):
        kube_source.SHARE_LATER_OVER = sys.maxsize
    try:
        yield
    finally:
        kube_source.SHARE_LATER_OVER = saved


async def _one_run(routes: int, echo_port: int, fetch_timeout_s: float | None,
                   events: Path | None, variant: str, *, members: int = 0
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
                                          stamps=stamps, routes=routes, port=gateway_port,
                                          variant=variant, members=members)
            if events is not None:
                other.update(events_of(events))
            return (times, {**other, **{f"xDS {k}": v for k, v in sorted(xds.items())}},
                    stamps.cpu)
    finally:
        for task in reversed(tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await stop(None, api, child)  # the client and the emulator, as bench/statuses.py


async def measured(controller: Controller, engine: Engine, tasks: list[asyncio.Task[None]],
                   emulator: int, recorded: list[int], *, stamps: Stamps, routes: int,
                   port: int, variant: str = "now", members: int = 0
                   ) -> tuple[dict[str, float], dict[str, float]]:
    """Start both (their tasks go to ``tasks``) and stamp every stage (``variant``: see the
    module docstring; ``members``: the members' nginx, whose CPU seconds are counted too)."""
    acks = Acks()
    controller.event_hooks.append(acks)
    controller.event_hooks.append(lambda event: stamp_answer(stamps, event))
    cpu0, emu0 = time.process_time(), cpu_seconds([emulator])
    member0 = cpu_seconds(tree(members)) if members else 0.0
    stamps.began = time.perf_counter()
    routes_acked = acks.next(types.ROUTE)
    tasks.append(asyncio.create_task(controller.run()))
    tasks.append(asyncio.create_task(engine.run()))
    await engine.wait_started()
    stamps.pid = engine.pid or 0
    log_from = log_size(stamps.pid)  # Envoy's stderr may be shared with earlier rounds
    await controller.started.wait()
    assert controller.pipeline is not None
    # Before the first update (the LISTs) and the first status pass:
    controller.pipeline.clusters_first = variant not in ("before", "no-clusters-first")
    if variant in ("before", "no-hold"):
        assert controller.status is not None
        controller.status.hold_first = None
    first_pass = time_first_pass(controller, stamps)
    assert controller.pipeline is not None
    state = await controller.pipeline.wait_for(lambda s: s.generation >= 1)
    stamps.stamp("first state")
    await engine.wait_ready(limit_s=600)
    stamps.stamp("Envoy ready")
    stamps.stamp("routes ACKed", await asyncio.wait_for(routes_acked, 600))
    stamps.stamp("first 200", await until_200(port, "r0.bench.test", "/", 600))
    stamps.stamp("last 200", await until_200(port, f"r{routes - 1}.bench.test", "/", 600))
    last_acks = {f"last {kind} ACKed": at for kind, at in stamps.last.items()}
    cpu = {"controller CPU": time.process_time() - cpu0,
           "emulator CPU": cpu_seconds([emulator]) - emu0,
           "Envoy CPU": cpu_seconds([engine.pid]) if engine.pid else -1.0,
           "members CPU": cpu_seconds(tree(members)) - member0 if members else -1.0}
    stamps.counts["Events at last 200"] = sum(recorded)
    if engine.pid:
        stamps.counts.update(fetch_timeouts_of(engine.pid, log_from))
    if engine.admin_address:
        stamps.counts.update(await failing_checks(engine.admin_address))
        stamps.counts.update(await watchdog(engine.admin_address))
    await asyncio.wait_for(first_pass.wait(), 600)
    timings = state.timings
    out = {**stamps.at, **last_acks}
    out.update({"translate": timings.translate_ms / 1000, "build": timings.build_ms / 1000,
                "cache set": timings.cache_ms / 1000})
    out["list + parse"] = out["first state"] - out["translate"] - out["build"] - out["cache set"]
    return out, {**cpu, **stamps.counts}


def stamp_answer(stamps: Stamps, event: Any) -> None:
    """Each type's first ACK ("<type> ACKed"); NACKs counted."""
    kind = getattr(event, "type_url", "").rsplit(".", 1)[-1]
    if isinstance(event, Ack):
        stamps.stamp(f"{kind} ACKed")
        stamps.last[kind] = time.perf_counter() - stamps.began
    elif isinstance(event, Nack):
        stamps.counts["NACKs"] = stamps.counts.get("NACKs", 0) + 1


async def failing_checks(address: str) -> dict[str, float]:
    """Members Envoy has failing their active check right after the last 200, and of those
    whose last check timed out (a main thread too busy to read the answer in time)."""
    _, text = await admin.request(address, "/clusters", limit_s=60)
    flags = [line.rsplit("::", 1)[-1] for line in text.splitlines() if "::health_flags::" in line]
    return {"members failing checks": sum("failed_active_hc" in f for f in flags),
            "... of which timed out": sum("active_hc_timeout" in f for f in flags)}


async def watchdog(address: str) -> dict[str, float]:
    """Envoy's main thread: times it did not come round within 200 ms (miss) and 1 s (mega)."""
    _, text = await admin.request(address, "/stats?filter=main_thread.watchdog", limit_s=60)
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if name.startswith("main_thread.watchdog_") and value.strip().isdigit():
            out[name.removeprefix("main_thread.")] = float(value)
    return out


def log_size(pid: int) -> int:
    """Bytes in Envoy's log (its stderr) so far, 0 if it is no file."""
    with contextlib.suppress(OSError):
        return Path(os.readlink(f"/proc/{pid}/fd/2")).stat().st_size
    return 0


def fetch_timeouts_of(pid: int, start: int = 0) -> dict[str, float]:
    """Envoy's "initial fetch timed out" warnings so far, per type, from its log (its stderr):
    a subscription (a cluster's load assignment, a scope's table) that gave up waiting, 15 s
    unless the bootstrap says otherwise; its cluster or listener then warms without it."""
    with open(os.readlink(f"/proc/{pid}/fd/2"), "rb") as log:
        log.seek(start)
        text = log.read().decode(errors="replace")
    out: dict[str, float] = {"fetch timeouts": 0}
    for line in text.splitlines():
        if "initial fetch timed out for " in line:
            kind = line.rsplit(".", 1)[-1].strip()
            out["fetch timeouts"] += 1
            out[f"... of {kind}"] = out.get(f"... of {kind}", 0) + 1
    return out


@contextlib.contextmanager
def counting_xds(stamps: Stamps) -> Iterator[dict[str, float]]:
    """Per type: delta requests Envoy sent, names they subscribed, responses and resources the
    server sent (route tables sent twice, or a response per name, show here); the streams
    Envoy opened (more than one: it reconnected and got everything again). Stamped: each
    type's first request ("<type> asked") and first response ("<type> sent")."""
    counts: dict[str, float] = {}
    sent_at: dict[str, tuple[str, float]] = {}  # nonce → (type, when sent)
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
        answered = sent_at.pop(request.response_nonce, None)
        if answered is not None:
            key = f"{answered[0]} longest answer wait s"
            counts[key] = max(counts.get(key, 0.0), time.perf_counter() - answered[1])
        return on_request(self, request)

    def changed(self: DeltaStream) -> Any:
        responses = on_change(self)
        for response in responses:
            kind = response.type_url.rsplit(".", 1)[-1]
            stamps.stamp(f"{kind} sent")
            add(f"{kind} responses", 1)
            add(f"{kind} sent", len(response.resources))
            sent_at[response.nonce] = (kind, time.perf_counter())
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
    summary: list[str] = []
    with nginx_member(echo_port) as members, tempfile.TemporaryDirectory() as tmp:
        for run, batch, variant in ((r, b, v) for r in range(args.runs) for b in args.batch
                                    for v in args.variants):
            events = Path(tmp, f"checks-{run}-{batch}-{variant}.log") if args.check_events else None
            times, other, cpu = await one_run(args.routes, echo_port, args.initial_fetch_timeout,
                                              batch=batch, events=events, variant=variant,
                                              members=members)
            load = os.getloadavg()[0]
            bound = f"at most {batch} resources per delta response" if batch else "no bound"
            bound += f", {variant}"
            print(f"run {run + 1}, {bound} (load {load:.1f}): {args.routes} HTTPRoutes + "
                  "Services + EndpointSlices in the emulator; seconds since controller + Envoy "
                  "start (stage durations for list + parse, translate, build and cache set)",
                  flush=True)
            summary.append(
                f"  run {run + 1} {bound:<46} first state {times['first state']:5.2f} s, last 200 "
                f"{times['last 200']:6.2f} s, statuses {times['status pass written']:6.2f} s; "
                f"CPU-s controller {other['controller CPU']:5.2f}, emulator "
                f"{other['emulator CPU']:5.2f}, Envoy {other['Envoy CPU']:5.2f}, members (nginx) "
                f"{other['members CPU']:5.2f}; timed out "
                f"{other.get('checks timed out', float('nan')):6.0f}, failing at last 200 "
                f"{other.get('members failing checks', float('nan')):5.0f}, watchdog mega "
                f"misses {other.get('watchdog_mega_miss', float('nan')):3.0f}, ADS streams "
                f"{other.get('xDS streams', float('nan')):.0f}, load {load:.1f}")
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
    print("side by side:\n" + "\n".join(summary), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--initial-fetch-timeout", type=float, default=ENGINE_FETCH_TIMEOUT_S,
                        help="Envoy's initial fetch timeout of clusters and listeners, s "
                             "(default: podway engine's; 15 is Envoy's own default)")
    parser.add_argument("--batch", type=lambda text: [int(b) for b in text.split(",")],
                        default=[DeltaStream.most_per_response],
                        help="bounds of resources per delta response to run, interleaved, "
                             "comma-separated (0: no bound); default: the server's")
    parser.add_argument("--variants", type=lambda text: text.split(","), default=["now"],
                        help="comma-separated, interleaved: now, before, no-clusters-first, "
                        "no-hold, no-share-later (see the module docstring)")
    parser.add_argument("--check-events", action="store_true",
                        help="log every pool's check events and count timeouts (costs Envoy "
                             "a little per failed check)")
    args = parser.parse_args()
    unknown = set(args.variants) - {"now", "before", "no-clusters-first", "no-hold",
                                    "no-share-later"}
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    ref = measure()
    print(ref.describe(), "(machine shared with other engineers: compare within one run)")
    asyncio.run(main_async(args, ref))
    print(ref.check_again())


if __name__ == "__main__":
    main()
