"""Controller convergence against the API emulator, through a real Envoy.

The emulator runs in a child process (so this process's RSS is the controller's), filled with
N ClusterIP Services + EndpointSlices (all at one loopback echo backend, ``podway echo`` in its
own process), one GatewayClass, one Gateway (HTTP listener) and N HTTPRoutes (host
``r<i>.bench.test`` → Service ``svc-<i>``). The controller runs here as ``podway controller``
runs it (events written, the GC policy of ``podway.programs.gc_policy`` unless ``--no-gc-policy``).
Then:

* first snapshot and status: controller start → first state; that state's status pass (every
  route's Accepted/ResolvedRefs and the Gateway's attachedRoutes PATCHed, bounded concurrency);
* EndpointSlice change at the API (a merge patch) → Envoy's EDS ACK, p50/p99/max over
  ``--tries``;
* new HTTPRoute created at the API → first 200 through Envoy (it was 404), p50/p99/max, and its
  stages (watch, coalescing, translate, build, cache, push + Envoy applies until Envoy's own
  ``update_time`` of the route table, Envoy applied → first 200; aside, the controller reading
  the ACK), Envoy's own apply time (``update_duration``) and the controller's GC pauses. The
  first 200 is seen by a prober child process (``--probe``: a kept-alive connection, a request
  every millisecond), an outside client that shares no GIL or event loop with the controller;
* controller RSS after all that (``/proc/self/status`` VmRSS; Envoy is another process);
* with ``--stalls MS``: what held the controller's event loop for MS ms or more during the
  new-route tries, where (sampled stacks), and which of those fell inside a try's watch or
  coalescing stage (``bench/loopstalls.py``).

Every pool is actively checked (Podway's default), all at the one echo process. Before the new
routes the bench waits until the members of the pools they will use passed their checks and
prints every member's health flags (the pools whose slices the EndpointSlice test moved to
127.0.0.2+ fail theirs: nothing listens there). A try that saw anything but 404 before its 200
prints what answered (status, ``server`` and ``x-envoy-*`` headers, the body's first line: Envoy's
local replies say why, e.g. "no healthy upstream"; count, first and last relative to Envoy's
``update_time``) and Envoy's ``/clusters`` lines of the route's pool (health flags, connection
and request counters); ``--watch-members`` also reads those members' flags every 100 ms during
each try and prints their changes with it.

``--rss`` measures memory the way it is deployed instead: the real ``podway controller``
command in its own process (CLI, every import it makes), against the same filled emulator,
until every route's status is written; then its VmRSS and peak (VmHWM) from ``/proc``. No
Envoy, no benchmark code in that process: the figure is the controller's alone.

Targets (issue 11): EDS ACK p99 ≤ 200 ms at 1,000 Services; new route p99 ≤ 100 ms at 1,000
routes, ≤ 150 ms at 10,000; status of 1,000 routes ≤ 2 s; RSS ≤ 150 MiB at 1,000 + 1,000.
Every time is also printed as a ratio to the machine-speed reference (``bench/speedref.py``)
measured in the same run. 100 tries take ~35 s at 1,000 routes, a few minutes at 10,000.

    .venv/bin/python bench/convergence.py [--sizes 1000,10000] [--tries 100] [--no-gc-policy]
                                          [--watch-members] [--stalls 5]
    .venv/bin/python bench/convergence.py --rss [--sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import http.client
import json
import logging
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes_asyncio import client

sys.path.insert(0, str(Path(__file__).parent))
import speedref
from loopstalls import StallWatch
from xds_push import Acks, free_port, pct  # the same helpers, one copy

from podway.envoy import types
from podway.envoy.engine import admin
from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy.xds.protocol import Ack
from podway.ir import Forward
from podway.pipeline import State
from podway.programs.controller.main import Controller, ControllerOptions
from podway.programs.gc_policy import GcPolicy
from podway.translate import TranslateOptions

try:
    from podway.kube.client import without_env_lookups
except ImportError:  # a commit before it (side-by-side runs): the client as it was
    def without_env_lookups(api: client.ApiClient) -> bool:
        return False

GW = "gateway.networking.k8s.io"
NS = "bench"


async def serve_emulator(count: int, echo_port: int, gateway_port: int) -> None:
    from podway.kube.emulator import KubeEmulator

    emu = KubeEmulator()
    url = await emu.start()
    emu.install_gateway_api()
    emu.put("gatewayclasses", {"metadata": {"name": "podway"},
                               "spec": {"controllerName": "podway.io/gateway-controller"}},
            group=GW)
    emu.put("gateways", {"metadata": {"name": "edge", "namespace": NS}, "spec": {
        "gatewayClassName": "podway", "listeners": [
            {"name": "http", "protocol": "HTTP", "port": gateway_port,
             "allowedRoutes": {"namespaces": {"from": "All"}}}]}}, group=GW)
    for i in range(count):
        emu.put("services", {"metadata": {"name": f"svc-{i}", "namespace": NS}, "spec": {
            "selector": {"app": f"a{i}"}, "ports": [{"name": "http", "port": 80,
                                                     "targetPort": echo_port}]}})
        emu.put("endpointslices", endpoint_slice(i, echo_port, "127.0.0.1"),
                group="discovery.k8s.io")
        emu.put("httproutes", route(i), group=GW)
    print(url, flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    await emu.stop()


def endpoint_slice(i: int, port: int, address: str) -> dict[str, Any]:
    return {"metadata": {"name": f"svc-{i}-1", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": f"svc-{i}"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": port}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}]}


def route(i: int, host: str | None = None) -> dict[str, Any]:
    """Route ``r<i>`` (or one named after ``host``) to Service ``svc-<i>``."""
    return {"apiVersion": f"{GW}/v1", "kind": "HTTPRoute",
            "metadata": {"name": f"r{i}" if host is None else host.split(".")[0],
                         "namespace": NS},
            "spec": {"parentRefs": [{"name": "edge"}],
                     "hostnames": [host or f"r{i}.bench.test"],
                     "rules": [{"backendRefs": [{"name": f"svc-{i}", "port": 80}]}]}}


# ---- measuring -------------------------------------------------------------------------
async def status_of(port: int, host: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        line = await reader.readline()
        return int(line.split()[1])
    finally:
        writer.close()  # and closed now: not inside the next try's API write (--stalls)
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def rss_mib(pid: int | str = "self", field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Figures:
    def __init__(self, ref: speedref.Reference) -> None:
        self.ref = ref

    def time(self, label: str, *seconds: float) -> None:
        ms = " / ".join(f"{s * 1000:.0f} ms" for s in seconds)
        ratios = " / ".join(self.ref.ratio(s) for s in seconds)
        print(f"  {label:<44} {ms:<22} ({ratios})", flush=True)


async def start_emulator(count: int, echo_port: int, gateway_port: int
                         ) -> asyncio.subprocess.Process:
    """The filled emulator in a child process (its first stdout line is its URL)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve-emulator", str(count), str(echo_port),
        str(gateway_port), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)


async def first_state(controller: Controller, out: Figures, count: int) -> None:
    """Start → first state, and the first status pass (timed around the writer's call)."""
    began = time.perf_counter()
    await controller.started.wait()
    assert controller.pipeline is not None
    assert controller.status is not None
    writer = controller.status
    first_pass: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    original = writer.write

    async def timed_write(state: State) -> int:
        t0 = time.perf_counter()
        written = await original(state)
        if written and not first_pass.done():
            first_pass.set_result(time.perf_counter() - t0)
        return written

    writer.write = timed_write  # type: ignore[method-assign]
    state = await controller.pipeline.wait_for(lambda s: True)
    out.time("start → first state (list, parse, translate)", time.perf_counter() - began)
    routes = sum(len(v.routes) for ls in state.ir.listeners for v in ls.virtual_hosts)
    print(f"  first state: {len(state.ir.pools)} pools, {routes} routes", flush=True)
    out.time(f"status of {count} routes + Gateway written", await first_pass)


async def serving(port: int, host: str, limit_s: float) -> None:
    """Until ``host`` answers 200 through the engine (each try is one request)."""
    async with asyncio.timeout(limit_s):
        while True:
            if await status_of(port, host) == 200:
                return


def probe(port: int) -> None:
    """The ``--probe`` child: for each host name read from stdin, ask ``127.0.0.1:port`` for
    ``/`` with that Host until it answers 200 (1 ms apart, on one kept-alive connection: Envoy
    picks the route table per request), then print ``perf_counter()`` of that answer
    (CLOCK_MONOTONIC: the same clock in every process), what came before it (status code or
    error → count) and the longest wait for one answer, and why: per kind of answer other than
    404 (status, the ``server`` and ``x-envoy-*`` headers and the body's first line: Envoy's
    local replies say "no healthy upstream", "upstream connect error …"; or the error), how
    many, and the ``perf_counter()`` of the first and last. An outside client: no GIL or event
    loop shared with the controller."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for line in sys.stdin:
        host = line.strip()
        seen: dict[str, int] = {}
        why: dict[str, list[float]] = {}  # kind → [count, first, last]
        longest = 0.0  # the longest wait for one answer: the prober or Envoy starved
        while host:
            asked = time.perf_counter()
            try:
                conn.request("GET", "/", headers={"Host": host})
                answer = conn.getresponse()
                body = answer.read()
                longest = max(longest, time.perf_counter() - asked)
            except (OSError, http.client.HTTPException) as exc:
                conn.close()  # closed by Envoy: the next request opens a new one
                code = type(exc).__name__
                kind = f"{code}: {exc}"
            else:
                if answer.status == 200:
                    break
                code = str(answer.status)
                kind = answer_kind(answer, body)
            seen[code] = seen.get(code, 0) + 1
            if code != "404":
                now = time.perf_counter()
                count, first, _ = why.get(kind, (0, now, now))
                why[kind] = [count + 1, first, now]
            time.sleep(0.001)
        if host:
            seen["longest wait ms"] = round(longest * 1000)
        # no host: a clock check
        print(time.perf_counter(), json.dumps({"seen": seen, "why": why}), flush=True)


def answer_kind(answer: http.client.HTTPResponse, body: bytes) -> str:
    """One line saying who answered and what: status, the ``server`` header, the names of
    ``x-envoy-*`` headers (with ``detailed_stats`` an answer from upstream carries
    ``x-envoy-upstream-service-time``, Envoy's own local reply does not; by default Podway's
    routers add none), the body's first line (at most 80 characters: Envoy's local replies
    say why)."""
    headers = [f"server: {v}" if k.lower() == "server" else k.lower()
               for k, v in answer.getheaders()
               if k.lower() == "server" or k.lower().startswith("x-envoy-")]
    first = body.decode("utf-8", "replace").split("\n", 1)[0][:80]
    return " | ".join([str(answer.status), *sorted(headers), repr(first)])


Why = dict[str, tuple[int, float, float]]  # kind of answer → count, first and last seen


class Prober:
    """The ``--probe`` child process (see ``probe``)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, port: int) -> Prober:
        process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--probe", str(port), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE)
        prober = cls(process)
        before = time.perf_counter()
        theirs, _, _ = await prober._ask("")
        if not before <= theirs <= time.perf_counter():
            raise RuntimeError("the prober's clock is not this process's: times would lie")
        return prober

    async def first_200(self, host: str, limit_s: float) -> tuple[float, dict[str, int], Why]:
        """``perf_counter()`` when ``host`` first answered 200 to the prober, the answers
        before it (code → count) and why those other than 404 came (see ``probe``)."""
        return await asyncio.wait_for(self._ask(host), limit_s)

    async def _ask(self, host: str) -> tuple[float, dict[str, int], Why]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"{host}\n".encode())
        await self.process.stdin.drain()
        when, found = (await self.process.stdout.readline()).decode().split(" ", 1)
        answers = json.loads(found)
        return float(when), answers["seen"], {k: (int(n), first, last) for k, (n, first, last)
                                               in answers["why"].items()}

    async def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 5)
        except TimeoutError:  # still polling a host that never came
            self.process.kill()
            await self.process.wait()


async def start_echo(port: int) -> asyncio.subprocess.Process:
    """The backend: ``podway echo`` in its own process (a backend is not in the controller's
    process, nor on its event loop), once it accepts connections."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "echo", "--port", str(port), "--name", "e",
        "--log-level", "warning")
    async with asyncio.timeout(60):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return process


class GcPauses:
    """This process's (the controller's) garbage collections: ``gc.callbacks``."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, int]] = []  # (start, seconds, generation)
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._began = now
        else:
            self.pauses.append((self._began, now - self._began, info["generation"]))

    def within(self, start: float, end: float) -> list[tuple[float, float, int]]:
        return [p for p in self.pauses if start <= p[0] < end]


async def rds_update_ms(address: str) -> int:
    """Envoy's ``…rds.<table>.update_time`` (wall-clock ms at which it finished applying its
    newest route table; one listener, one table here)."""
    _, body = await admin.request(address, "/stats?filter=rds\\..*\\.update_time$",
                                  limit_s=30)  # 120,000 stats at 10,000 pools, loaded
    return max(int(v) for v in re.findall(r"update_time: (\d+)", body))


async def rds_apply_quantiles(address: str) -> str:
    """Envoy's own ``update_duration`` histogram of the route table (its apply time, every
    update so far; flushed every 5 s)."""
    _, body = await admin.request(address, "/stats?filter=rds\\..*\\.update_duration$",
                                  limit_s=30)
    found = dict(re.findall(r"P([\d.]+)\([^,]*,([^)]*)\)", body))
    if not found:
        return "no values"
    return " / ".join(f"{float(found.get(q, 'nan')):.0f}" for q in ("50", "99", "100")) + " ms"


_MEMBER_FIGURES = {"health_flags", "cx_total", "cx_active", "cx_connect_fail", "rq_total",
                   "rq_success", "rq_error", "rq_timeout", "rq_active", "rq_pending_active"}


class MemberWatch:
    """``--watch-members``: Envoy's health flags of a try's pool members, read every 100 ms
    while the try runs (``/clusters`` for those pools only), each change with its time. Runs on
    the controller's event loop: for finding out, not for figures."""

    def __init__(self, task: asyncio.Task[None], seen: list[tuple[float, str]]) -> None:
        self.task, self.seen = task, seen

    @classmethod
    def start(cls, address: str, state: State | None, host: str) -> MemberWatch:
        """Watch the members of the pools ``host`` routes to in ``state``."""
        assert state is not None
        pools = _pools_of(state, host)
        seen: list[tuple[float, str]] = []

        async def watch() -> None:
            while True:
                try:
                    flags = " ".join(f"{f}:{n}" for f, n in sorted(
                        (await member_health(address, pools)).items()))
                except (OSError, TimeoutError) as exc:
                    flags = f"(admin: {exc!r})"
                if not seen or seen[-1][1] != flags:
                    seen.append((time.perf_counter(), flags))
                await asyncio.sleep(0.1)

        return cls(asyncio.create_task(watch()), seen)

    async def stop(self) -> list[tuple[float, str]]:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        return self.seen


async def first_200(served: asyncio.Future[tuple[float, dict[str, int], Why]],
                    watcher: MemberWatch | None, *, address: str, i: int, host: str,
                    pools: list[str], created: float
                    ) -> tuple[float, dict[str, int], Why, list[tuple[float, str]] | None]:
    """The prober's answer for try ``i`` and the member flags watched meanwhile; with no 200
    in time, what Envoy says of the route's pools (times from the route's creation), then the
    ``TimeoutError``."""
    try:
        t_200, answers, why = await served
    except TimeoutError:
        flags = await watcher.stop() if watcher is not None else None
        await explain_answers(address, i, host, pools, {}, applied_at=created, flags=flags,
                              since="the route's creation")
        raise
    return t_200, answers, why, await watcher.stop() if watcher is not None else None


async def explain_answers(address: str, i: int, host: str, pools: list[str], why: Why, *,
                          applied_at: float, flags: list[tuple[float, str]] | None = None,
                          since: str = "Envoy's update_time") -> None:
    """Print what answered try ``i`` before its 200 (kind, count, first and last relative to
    ``applied_at``: Envoy's ``update_time`` of the route table, or ``since``), the member flags
    watched during the try (``--watch-members``) and, read from Envoy's admin right after the
    200, its view of each pool of the route: the member lines of ``/clusters`` (health flags,
    connection and request counters, nonzero ones; Podway's bootstrap keeps no per-pool
    stats)."""
    print(f"  try #{i} ({host} → {', '.join(pools)}) answered before its 200 "
          f"(times from {since}):", flush=True)
    for kind, (n, first, last) in why.items():
        print(f"    {n} x {kind}, {(first - applied_at) * 1000:+.0f} … "
              f"{(last - applied_at) * 1000:+.0f} ms", flush=True)
    if flags is not None:
        print("    members during the try (--watch-members): " + ", ".join(
            f"{(t - applied_at) * 1000:+.0f} ms {f}" for t, f in flags), flush=True)
    for pool in pools:
        name = re.escape(pool)
        try:
            _, members = await admin.request(
                address, "/clusters?filter=" + quote(f"^{name}$", safe=""), limit_s=60)
        except (OSError, TimeoutError) as exc:
            print(f"    Envoy admin did not answer: {exc!r}", flush=True)
            continue
        lines = []
        for line in members.splitlines():
            parts = line.removeprefix(f"{pool}::").split("::")
            if len(parts) == 3 and parts[1] in _MEMBER_FIGURES and parts[2] != "0":
                lines.append("::".join(parts))
        print(f"    /clusters {pool}: {'; '.join(lines) or 'no member'}", flush=True)


async def member_health(address: str, pools: list[str] | None = None) -> dict[str, int]:
    """Envoy's health flags of the members of ``pools`` (default: every pool), read from
    ``/clusters`` (Podway's bootstrap keeps no per-pool stats) → how many members have them:
    ``healthy``, or why not (e.g. ``/failed_active_hc/active_hc_timeout``)."""
    path = "/clusters"
    if pools is not None:
        path += "?filter=" + quote(f"^({'|'.join(re.escape(p) for p in pools)})$", safe="")
    _, body = await admin.request(address, path, limit_s=120)
    flags: dict[str, int] = {}
    for line in body.splitlines():
        name, _, rest = line.partition("::")
        if name != "podway-xds" and "::health_flags::" in rest:
            flag = rest.rsplit("::", 1)[1]
            flags[flag] = flags.get(flag, 0) + 1
    return flags


async def members_healthy(address: str, pools: list[str], limit_s: float) -> str:
    """Until every member of ``pools`` passed its check (``limit_s`` at most); how long that
    took and what is left. The backend, one echo process, answers the checks of every pool,
    and those of all pools start at once with the engine; real members are many processes."""
    began = time.perf_counter()
    while True:
        flags = await member_health(address, pools)
        failing = sum(n for flag, n in flags.items() if flag != "healthy")
        waited = time.perf_counter() - began
        if not failing or waited > limit_s:
            return (f"{flags.get('healthy', 0)} of {sum(flags.values())} healthy after "
                    f"{waited:.0f} s" + (f"; {flags}" if failing else ""))
        await asyncio.sleep(1)


async def tries_pools_healthy(controller: Controller, address: str, *, count: int,
                              tries: int) -> None:
    """Until the members of the pools the new routes will use passed their checks (a member
    failing its check gets no traffic, whatever the route); print that, and every pool's."""
    assert controller.pipeline is not None
    state = controller.pipeline.state
    assert state is not None
    used = [p for i in range(tries) for p in _pools_of(state, f"r{count - 1 - i}.bench.test")]
    print(f"  members of the pools the new routes use: "
          f"{await members_healthy(address, used, 300)}; all pool members (Envoy's health "
          f"flags): {await member_health(address)}", flush=True)


async def endpoint_changes(api: client.ApiClient, acks: Acks, out: Figures, *, tries: int,
                           echo_port: int) -> None:
    discovery: Any = client.DiscoveryV1Api(api)
    eds = []
    for i in range(tries):
        done = acks.next(types.ENDPOINT)
        t0 = time.perf_counter()
        await discovery.patch_namespaced_endpoint_slice(
            f"svc-{i}-1", NS, endpoint_slice(i, echo_port, f"127.0.0.{2 + i % 200}"),
            _content_type="application/merge-patch+json")
        eds.append(await asyncio.wait_for(done, 30) - t0)
    out.time(f"EndpointSlice change → EDS ACK ({tries} tries) p50 / p99 / max", *_p(eds))


@dataclass
class Tries:
    """Per-try seconds of each stage of "new HTTPRoute → first 200"."""

    parts: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in (
        "total", "watch", "coalesce", "translate", "build", "cache", "apply", "serve",
        "ack")})
    answers: list[dict[str, int]] = field(default_factory=list)  # before each first 200
    windows: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # --stalls

    def add(self, **values: float) -> None:
        for name, value in values.items():
            self.parts[name].append(value)

    def window(self, **spans: tuple[float, float]) -> None:
        """When stages of one try began and ended (``perf_counter``)."""
        for name, span in spans.items():
            self.windows.setdefault(name, []).append(span)


async def new_routes(controller: Controller, api: client.ApiClient, out: Figures, *,
                     tries: int, count: int, gateway_port: int, prober: Prober,
                     envoy_admin: str, pauses: GcPauses, watch_members: bool = False,
                     stalls: StallWatch | None = None) -> None:
    """Create → first 200, split into its stages: the API write and the watch event reaching
    the source; coalescing (debounce) until translation starts; translate; build (the changed
    virtual host encoded, the table joined); cache; push + Envoy applying the route table (cache
    set → Envoy's own ``update_time`` of it, 1 ms steps); Envoy applied → the first 200 an
    outside client (``--probe`` process) sees. Beside the sum: Envoy applied → its ACK read by
    the controller (its event loop may be busy with the status pass then; nothing waits on
    that read), and the controller's GC pauses inside the tries."""
    assert controller.pipeline is not None
    assert controller.source is not None
    pipeline, source = controller.pipeline, controller.source
    staged: dict[str, float] = {}
    stage = source._stage  # a bench-only probe: when the watch event arrived

    def timed_stage(ident: Any, obj: Any, error: Any) -> None:
        kind, (_, name) = ident
        if kind == "HTTPRoute":
            staged.setdefault(name, time.perf_counter())
        stage(ident, obj, error)

    source._stage = timed_stage  # type: ignore[method-assign]
    applied_at: dict[int, tuple[float, float, float]] = {}  # generation → began, cached, wall
    apply = pipeline._apply  # a bench-only probe: translation start, cache set

    def timed_apply(update: Any) -> State:
        began = time.perf_counter()
        state = apply(update)
        applied_at[state.generation] = (began, time.perf_counter(), time.time())
        return state

    pipeline._apply = timed_apply  # type: ignore[method-assign]
    acks, acked = _route_acks(controller)
    custom: Any = client.CustomObjectsApi(api)
    tried = Tries()
    began_all = time.perf_counter()
    for i in range(tries):
        host = f"new{i}.bench.test"
        assert await status_of(gateway_port, host) == 404
        served = asyncio.ensure_future(prober.first_200(host, 60))
        watcher = (MemberWatch.start(envoy_admin, pipeline.state, f"r{count - 1 - i}.bench.test")
                   if watch_members else None)  # the pools of that route are the try's
        del acks[:]
        acked.clear()
        t0 = time.perf_counter()
        # A Service the endpoint test did not move (those now point at 127.0.0.2+).
        await custom.create_namespaced_custom_object(GW, "v1", NS, "httproutes",
                                                     route(count - 1 - i, host))
        state = await pipeline.wait_for(functools.partial(_has_host, host=host))
        t_200, answers, why, flags = await first_200(
            served, watcher, address=envoy_admin, i=i, host=host, pools=_pools_of(state, host),
            created=t0)
        tried.answers.append(answers)
        await asyncio.wait_for(acked.wait(), 60)  # read by this loop: maybe after the 200
        timings = state.timings
        began, cached, cached_wall = applied_at[state.generation]
        t_staged = staged.get(host.split(".", maxsplit=1)[0], began)
        applied = max(0.0, (await rds_update_ms(envoy_admin)) / 1000 - cached_wall)
        tried.add(total=t_200 - t0, watch=t_staged - t0, coalesce=began - t_staged,
                  translate=timings.translate_ms / 1000, build=timings.build_ms / 1000,
                  cache=timings.cache_ms / 1000, apply=applied,
                  serve=max(0.0, t_200 - cached - applied),
                  ack=max(0.0, acks[0] - cached - applied))
        if why:  # anything but 404 before the 200: say what answered, and Envoy's view
            await explain_answers(envoy_admin, i, host, _pools_of(state, host), why,
                                  applied_at=cached + applied, flags=flags)
        tried.window(watch=(t0, t_staged), coalescing=(t_staged, began))
    ended = time.perf_counter()
    await report_new_routes(out, tried, tries=tries, envoy_admin=envoy_admin,
                            pauses=pauses.within(began_all, ended))
    if stalls is not None:
        stalls.report(began_all, ended, waits=tried.windows)


def _route_acks(controller: Controller) -> tuple[list[float], asyncio.Event]:
    """When the controller reads each route ACK (perf_counter), and an event set at each."""
    acks: list[float] = []
    acked = asyncio.Event()

    def on_ack(event: Any) -> None:
        if isinstance(event, Ack) and event.type_url == types.ROUTE:
            acks.append(time.perf_counter())
            acked.set()

    controller.event_hooks.append(on_ack)
    return acks, acked


async def report_new_routes(out: Figures, tried: Tries, *, tries: int, envoy_admin: str,
                            pauses: list[tuple[float, float, int]]) -> None:
    parts = tried.parts
    out.time(f"new HTTPRoute → first 200 ({tries} tries) p50 / p99 / max", *_p(parts["total"]))
    out.time("  API write + watch event", *_p(parts["watch"]))
    out.time("  coalescing (debounce)", *_p(parts["coalesce"]))
    out.time("  translate", *_p(parts["translate"]))
    out.time("  build (encode)", *_p(parts["build"]))
    out.time("  cache set", *_p(parts["cache"]))
    out.time("  push + Envoy applies (cache set → its RDS update_time)", *_p(parts["apply"]))
    out.time("  Envoy applied → first 200 (outside client)", *_p(parts["serve"]))
    out.time("  (aside) Envoy applied → its ACK read here", *_p(parts["ack"]))
    slowest = max(range(len(parts["total"])), key=parts["total"].__getitem__)
    other: dict[str, int] = {}
    for answers in tried.answers:
        for code, n in answers.items():
            if code not in ("404", "longest wait ms"):
                other[code] = other.get(code, 0) + n
    print(f"  answers before the first 200: slowest try (#{slowest}) "
          f"{tried.answers[slowest]}; other than 404 in all tries: {other or 'none'}",
          flush=True)
    print(f"  pool members after the tries (Envoy's health flags): "
          f"{await member_health(envoy_admin)}", flush=True)
    await asyncio.sleep(5.5)  # Envoy flushes histograms every 5 s
    print(f"  Envoy's own route table apply time (update_duration) p50 / p99 / max: "
          f"{await rds_apply_quantiles(envoy_admin)}", flush=True)
    full = [p[1] for p in pauses if p[2] == 2]
    young = [p[1] for p in pauses if p[2] < 2]
    print(f"  controller GC during the tries: {len(full)} full collections (longest "
          f"{max(full, default=0) * 1000:.0f} ms), {len(young)} young (longest "
          f"{max(young, default=0) * 1000:.0f} ms, {sum(young) * 1000:.0f} ms in all)",
          flush=True)


def _p(values: list[float]) -> tuple[float, float, float]:
    return pct(values, 0.5), pct(values, 0.99), max(values)


def _stop_if_failed(main: asyncio.Task[Any] | None, task: asyncio.Task[None]) -> None:
    """The controller failed: say why and stop the run (nothing it waits for would come)."""
    if not task.cancelled() and task.exception() is not None and main is not None:
        print(f"controller failed: {task.exception()!r}", file=sys.stderr, flush=True)
        main.cancel()


def _pools_of(state: State, host: str) -> list[str]:
    return [b.pool for ls in state.ir.listeners for v in ls.virtual_hosts if v.hostname == host
            for r in v.routes if isinstance(r.action, Forward) for b in r.action.backends
            if b.pool is not None]


def _has_host(state: State, *, host: str) -> bool:
    """The state translated the route of ``host`` (one lookup: a walk of every virtual host,
    at each state published, held the controller's loop ~10 ms at 10,000 on a loaded machine;
    the 200 shows the host is served)."""
    return (NS, host.split(".", 1)[0]) in state.update.snapshot.objects.get("HTTPRoute", {})


async def bench_size(count: int, tries: int, ref: speedref.Reference, *,
                     gc_policy: GcPolicy | None, watch_members: bool = False,
                     stalls: StallWatch | None = None) -> None:
    out = Figures(ref)
    print(f"== {count} Services + EndpointSlices, {count} HTTPRoutes", flush=True)
    echo_port, gateway_port = free_port(), free_port()
    echo = await start_echo(echo_port)
    child = await start_emulator(count, echo_port, gateway_port)
    prober = await Prober.start(gateway_port)
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    baseline = rss_mib()
    api: client.ApiClient | None = None
    tasks: list[asyncio.Task[None]] = []
    try:
        assert child.stdout is not None
        url = (await child.stdout.readline()).decode().strip()
        api = client.ApiClient(client.Configuration(host=url))
        without_env_lookups(api)  # as podway.kube.client.connect does
        controller = Controller(ControllerOptions(
            translate=TranslateOptions(address="127.0.0.1"), xds_address="127.0.0.1:0",
            xds_unauthenticated=True, lb_address="127.0.0.1", gc=gc_policy), api=api)
        acks = Acks()
        controller.event_hooks.append(acks)
        tasks.append(asyncio.create_task(controller.run()))
        tasks[-1].add_done_callback(functools.partial(_stop_if_failed, asyncio.current_task()))
        await first_state(controller, out, count)
        assert controller.server is not None
        engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
            BootstrapOptions(node_id="bench", xds=controller.server.target, delta=True))))
        tasks.append(asyncio.create_task(engine.run()))
        await engine.wait_ready(limit_s=120)
        await serving(gateway_port, "r0.bench.test", 600)  # 10,000 clusters on a busy machine
        await endpoint_changes(api, acks, out, tries=tries, echo_port=echo_port)
        if gc_policy is not None:
            # The first settle: once the first state and its status pass are done.
            await asyncio.wait_for(controller.gc_first_settle.wait(), 120)
            settled = controller.gc_settled
            assert settled is not None
            print(f"  GC policy: {settled.frozen} objects frozen after the first state "
                  f"(that settle's pause: {settled.seconds * 1000:.0f} ms)", flush=True)
        await tries_pools_healthy(controller, await engine.wait_started(), count=count,
                                  tries=tries)
        await new_routes(controller, api, out, tries=tries, count=count,
                         gateway_port=gateway_port, prober=prober,
                         envoy_admin=await engine.wait_started(), pauses=pauses,
                         watch_members=watch_members, stalls=stalls)
        print(f"  controller RSS: {rss_mib():.0f} MiB, of which {baseline:.0f} MiB before it "
              "started (interpreter, libraries); emulator, echo, prober and Envoy are other "
              "processes", flush=True)
    finally:
        gc.callbacks.remove(pauses)
        for task in reversed(tasks):  # the engine, then the controller
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if api is not None:
            await api.close()
        await prober.stop()
        if child.stdin is not None:
            child.stdin.close()
        await child.wait()
        echo.terminate()
        await echo.wait()


def write_kubeconfig(folder: Path, url: str) -> Path:
    """A kubeconfig in ``folder`` for the emulator at ``url`` (any token)."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: e, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: e, context: {cluster: e, user: u}}]\ncurrent-context: e\n")
    return kubeconfig


async def controller_rss(count: int) -> None:
    """The real command's memory at ``count`` Services + routes (see the module docstring)."""
    echo_port, gateway_port, metrics_port = free_port(), free_port(), free_port()
    child = await start_emulator(count, echo_port, gateway_port)
    controller: asyncio.subprocess.Process | None = None
    folder = Path(tempfile.mkdtemp(prefix="podway-rss-"))
    try:
        assert child.stdout is not None
        url = (await child.stdout.readline()).decode().strip()
        kubeconfig = write_kubeconfig(folder, url)
        began = time.perf_counter()
        controller = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podway", "controller", "--kubeconfig", str(kubeconfig),
            "--xds-listen", f"127.0.0.1:{free_port()}", "--xds-unauthenticated",
            "--backend-mode", "clusterip",  # the bench Services are served in this mode
            "--address", "127.0.0.1", "--lb-address", "127.0.0.1", "--log-level", "warning",
            "--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1")
        async with client.ApiClient(client.Configuration(host=url)) as api:
            custom: Any = client.CustomObjectsApi(api)
            last = f"r{count - 1}"
            async with asyncio.timeout(600):
                while True:  # until the last route's status is written (1 s polls)
                    obj = await custom.get_namespaced_custom_object(GW, "v1", NS, "httproutes",
                                                                    last)
                    if (obj.get("status") or {}).get("parents"):
                        break
                    await asyncio.sleep(1)
        settled = time.perf_counter() - began
        await asyncio.sleep(5)  # the last status writes and their watch events
        pid = controller.pid
        print(f"  {count} + {count}: controller RSS {rss_mib(pid):.0f} MiB, peak "
              f"{rss_mib(pid, 'VmHWM'):.0f} MiB (start → every status written: {settled:.1f} s)",
              flush=True)
    finally:
        await stop_run(controller, child, folder)


async def stop_run(controller: asyncio.subprocess.Process | None,
                   emulator: asyncio.subprocess.Process, folder: Path) -> None:
    """Stop a ``podway controller`` child (if it still runs) and the emulator child (it stops
    when its stdin closes); remove the run's folder."""
    if controller is not None and controller.returncode is None:
        controller.terminate()
        await controller.wait()
    if emulator.stdin is not None:
        emulator.stdin.close()
    await emulator.wait()
    shutil.rmtree(folder, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--tries", type=int, default=100)
    parser.add_argument("--no-gc-policy", action="store_true",
                        help="leave the controller's garbage collector as CPython sets it (the "
                             "command applies podway.programs.gc_policy): for before/after figures")
    parser.add_argument("--watch-members", action="store_true",
                        help="read the health flags of each try's pool members every 100 ms "
                             "and print their changes with a try that saw other than 404 "
                             "(on the controller's loop: to find out why, not for figures)")
    parser.add_argument("--stalls", type=float, metavar="MS",
                        help="also print what held the controller's event loop for MS ms or "
                             "more during the new-route tries, and where (bench/loopstalls.py)")
    parser.add_argument("--rss", action="store_true",
                        help="only the real command's memory (its own process, no Envoy)")
    parser.add_argument("--serve-emulator", nargs=3, type=int, metavar=("N", "ECHO", "PORT"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--probe", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_emulator:
        await serve_emulator(*args.serve_emulator)
        return
    if args.probe:
        probe(args.probe)
        return
    logging.basicConfig(level=logging.WARNING)
    if args.rss:
        print("== podway controller (its own process): RSS once every status is written")
        for size in (int(s) for s in args.sizes.split(",")):
            await controller_rss(size)
        return
    ref = speedref.measure()
    print(ref.describe(), flush=True)
    stalls = StallWatch(threshold_s=args.stalls / 1000) if args.stalls else None
    if stalls is not None:
        stalls.start()
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            await bench_size(size, args.tries, ref, watch_members=args.watch_members,
                             stalls=stalls, gc_policy=None if args.no_gc_policy else GcPolicy())
    finally:
        if stalls is not None:
            stalls.stop()
    print(ref.check_again(), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
