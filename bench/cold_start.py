"""Cold start: ``podway run`` on a folder of N routes, from start to every route served.

The folder is ``bench/xds_push.py``'s (N Ingress paths, 10 per host, one Service + EndpointSlice
per path, 2N + N/1000 objects, Services and slices in one file), the members one local nginx
(one worker; ``--echo`` uses ``podway echo`` in this process instead, as before: then its
answers to the first round of N health checks, in Python beside the control plane, are part of
the figures, which no real member set is).
Standalone Podway starts in this process (its Envoy is a real one); the stages are stamped as
they end:

* parse:       the file source's first update (every file read and typed);
* translate, build, cache set: the first generation's own timings;
* Envoy ready: its admin answers (it starts beside the parse);
* config ACKed: Envoy's ACK of the route tables after the first push;
* first 200 / last 200: the first and the last route answer through Envoy (the last one is
  polled from the moment the routes are ACKed; a route whose member is not healthy yet answers
  503, so this includes the first health-check round).

Standalone runs with the garbage-collector policy ``podway run`` uses (``GcPolicy``), so the
figures are what a user's ``podway run`` does. ``--process`` also times the real command:
``podway run --manifests`` in a child process (interpreter start and imports included; Podway's
modules are byte-compiled first, as an installed Podway's are), from its spawn to the first and
the last route answering 200, with the CPU seconds (utime+stime) of Podway's process and of its
Envoy up to then (CPU well below the wall time: the machine's other work, not ours), and the
stages its log stamps (``--log-level info``): Envoy spawned, the folder parsed (the file
source's first load), the first state (with its translate + build + cache set), Envoy
listening. Podway's CPU includes its prefetch process (a reaped child). Modes alternate within
a run (``--runs`` rounds of each), so a busy spell of the shared machine lands on both alike.
``--compare PODWAY`` also runs another checkout's ``podway`` (its venv's), alternating with
this one round by round (the order swapped every round), and prints the two side by side.
``--until-listening`` (a loaded machine): no members, each run timed until its Envoy listens
(the first check round of 10,000 pools can time out and feed itself there); ``--limit-s``:
how long to wait.

Target (issue 24): every route served ≤ 5 s after the start at 10,000 routes. Each time is also
printed as a ratio to the machine-speed reference (``bench/speedref.py``).

    python bench/cold_start.py [--routes 10000] [--runs 1] [--process]
    python bench/cold_start.py --process-only --runs 3 --compare ../base/.venv/bin/podway
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import datetime
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import xds_push
from dataplane import cpu_seconds, tree
from speedref import Reference, measure
from xds_push import Acks, free_port, manifests, status_of

from podway.envoy import types
from podway.programs.gc_policy import GcPolicy
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.sources import files
from podway.sources.prefetch import Prefetch
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve
from podway.translate import TranslateOptions

LIMIT_S = 120.0  # --limit-s: how long a route may take to answer 200


async def until_200(port: int, host: str, path: str, limit_s: float | None = None) -> float:
    limit_s = LIMIT_S if limit_s is None else limit_s
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        with contextlib.suppress(OSError, ValueError, IndexError):
            if await status_of(port, host, path) == 200:
                return time.perf_counter()
        await asyncio.sleep(0.01)
    raise SystemExit(f"{host}{path} never answered 200 within {limit_s} s")


async def one_run(routes: int, echo_port: int) -> dict[str, float]:
    stamps: dict[str, float] = {}
    watch = files.FileSource.watch

    async def stamped(self: files.FileSource, **kwargs: Any) -> AsyncIterator[Any]:
        async for update in watch(self, **kwargs):
            stamps.setdefault("parse", time.perf_counter())
            yield update

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifests(root, routes, echo_port)
        http_port = free_port()
        acks = Acks()
        began = time.perf_counter()
        standalone = Standalone(StandaloneOptions(
            manifests=root, drain_s=0, gc=GcPolicy(), prefetch=Prefetch(root),
            translate=TranslateOptions(
                address="127.0.0.1", http_port=http_port, https_port=free_port())))
        standalone.event_hooks.append(acks)
        routes_acked = acks.next(types.ROUTE)
        files.FileSource.watch = stamped  # type: ignore[method-assign]
        task = asyncio.create_task(standalone.run())
        try:
            state = await standalone.pipeline.wait_for(lambda s: s.generation >= 1)
            stamps["first state"] = time.perf_counter()
            engine = await standalone.engine()
            assert engine is not None
            await engine.wait_ready(limit_s=120)
            stamps["Envoy ready"] = time.perf_counter()
            stamps["config ACKed"] = await asyncio.wait_for(routes_acked, 120)
            per_host = xds_push.PATHS_PER_HOST
            hosts = routes // per_host
            stamps["first 200"] = await until_200(http_port, "h0.bench.test", "/app0")
            stamps["last 200"] = await until_200(http_port, f"h{hosts - 1}.bench.test",
                                                 f"/app{per_host - 1}")
            timings = state.timings
        finally:
            files.FileSource.watch = watch  # type: ignore[method-assign]
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    out = {name: at - began for name, at in stamps.items()}
    out.update({"translate": timings.translate_ms / 1000, "build": timings.build_ms / 1000,
                "cache set": timings.cache_ms / 1000})
    return out


#: --until-listening: no members (the pools point at a closed port, so every first check
#: fails at once) and each ``podway run`` is timed until its Envoy listens, not to 200s: on a
#: loaded machine the first check round of 10,000 pools can time out and feed itself for
#: minutes (docs/performance.md, "Cold start from the controller's side").
UNTIL_LISTENING = False


async def until_logged(log: Path, marker: str) -> None:
    deadline = time.perf_counter() + LIMIT_S
    while marker not in log.read_text(errors="replace"):  # noqa: ASYNC240 - a small log
        if time.perf_counter() > deadline:
            raise SystemExit(f"no {marker!r} in the log within {LIMIT_S} s")
        await asyncio.sleep(0.05)


def cpu_s(pid: int, *, children: bool = True) -> float:
    """utime + stime of ``pid`` and (``children``) its reaped children so far, seconds
    (``/proc/PID/stat``; ``podway run``'s reaped child is its prefetch process)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15 if children else 13]) / os.sysconf("SC_CLK_TCK")


def compiled() -> None:
    """Podway's modules byte-compiled, as an installed Podway's are (pip and the image compile
    them): with ``PYTHONDONTWRITEBYTECODE`` set and an editable checkout, every ``podway run``
    would otherwise compile each module again, ~0.25 CPU-s that no user's start pays."""
    import podway

    compileall.compile_dir(Path(podway.__file__).parent, quiet=1)


async def one_process_run(routes: int, echo_port: int, podway: str | None = None
                          ) -> dict[str, float]:
    """``podway run --manifests`` in a child process: spawn → first / last route 200, and
    the stages its log stamps (``stages``)."""
    if podway is None:
        podway = shutil.which("podway", path=str(Path(sys.executable).parent))
        if podway is None:
            raise SystemExit("no podway command beside this interpreter")
        compiled()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "manifests"
        root.mkdir()
        manifests(root, routes, echo_port)
        http_port = free_port()
        log = Path(tmp) / "podway.log"
        began, wall = time.perf_counter(), time.time()
        with log.open("wb") as err:
            child = await asyncio.create_subprocess_exec(
                podway, "run", "--manifests", str(root), "--address", "127.0.0.1",
                "--http-port", str(http_port), "--https-port", str(free_port()),
                "--state-dir", str(Path(tmp) / "state"), "--log-level", "info",
                stdout=asyncio.subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            per_host = xds_push.PATHS_PER_HOST
            hosts = routes // per_host
            if UNTIL_LISTENING:
                await until_logged(log, "serving ")
            else:
                out["first 200"] = await until_200(http_port, "h0.bench.test", "/app0") - began
                out["last 200"] = await until_200(http_port, f"h{hosts - 1}.bench.test",
                                                  f"/app{per_host - 1}") - began
            out["podway CPU"] = cpu_s(child.pid)
            out["(its own)"] = cpu_s(child.pid, children=False)
            out["Envoy CPU"] = cpu_seconds([p for p in tree(child.pid) if p != child.pid])
            out["fetch timeouts"] = float(fetch_timeouts(Path(tmp) / "state"))
            out.update(stages(log.read_text(errors="replace"), wall))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(child.wait(), 30)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                await child.wait()
    return out


ORDER = ["first 200", "last 200", "podway CPU", "(its own)", "Envoy CPU", "fetch timeouts",
         "Envoy spawned", "parsed", "first state", "(translate+build)", "Envoy listens"]


#: Log lines of ``podway run`` (``--log-level info``) that end a stage: the first of each.
STAGE_LINES = (("Envoy spawned", "envoy started pid="),
               ("parsed", "first load of "),
               ("first state", "applied update in "),
               ("Envoy listens", "serving "))


def stages(text: str, spawned_at: float) -> dict[str, float]:
    """Seconds from the spawn (``time.time()``) to each stage's first log line, and the first
    state's translate + build + cache set (its "applied update in N ms")."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        for name, marker in STAGE_LINES:
            if name in out or marker not in line:
                continue
            with contextlib.suppress(ValueError):
                at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                out[name] = at - spawned_at
                if name == "first state":
                    ms = line.split(marker, 1)[1].split(" ms", 1)[0]
                    out["(translate+build)"] = float(ms) / 1000
    return out


def fetch_timeouts(state: Path) -> int:
    """Envoy's "initial fetch timed out" warnings so far (each a subscription, say a scope's
    route table, that had no answer within its initial fetch timeout)."""
    return sum(log.read_text(errors="replace").count("initial fetch timed out")
               for log in state.rglob("envoy.log"))


@contextlib.contextmanager
def nginx_member(port: int) -> Iterator[int]:
    """One nginx worker answering 200 to any request on ``port`` (every pool's member); yields
    nginx's master PID (its worker is its child: ``dataplane.tree``)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        temps = "\n".join(f"  {k}_temp_path {folder}/{k};" for k in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = folder / "nginx.conf"
        conf.write_text(f"""worker_processes 1;
daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 16384; }}
http {{
  access_log off;
{temps}
  server {{
    listen 127.0.0.1:{port} backlog=16384;
    location / {{ default_type text/plain; return 200 "ok\\n"; }}
  }}
}}
""")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        proc = subprocess.Popen([nginx, "-p", tmp, "-e", str(folder / "error.log"),
                                 "-c", str(conf)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(OSError), socket.create_connection(
                        ("127.0.0.1", port), timeout=1):
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"nginx did not start (see {folder / 'error.log'})")
                time.sleep(0.05)
            yield proc.pid
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def main_async(args: argparse.Namespace, ref: Reference) -> None:
    echo_port = free_port()
    with contextlib.ExitStack() as stack:
        if args.echo:
            started = asyncio.Event()
            echo = asyncio.create_task(serve(EchoOptions(
                port=echo_port, identity=Identity(name="e")), started=started))
            await started.wait()
            stack.callback(echo.cancel)
        elif not UNTIL_LISTENING:
            stack.enter_context(nginx_member(echo_port))
        await rounds(args, ref, echo_port)


async def rounds(args: argparse.Namespace, ref: Reference, echo_port: int) -> None:
    for run in range(args.runs):
        figures = {} if args.process_only else await one_run(args.routes, echo_port)
        if figures:
            print(f"run {run + 1}: {args.routes} routes in this process (imports done), "
                  "seconds since the start (stage durations for translate, build and cache "
                  "set)", flush=True)
        for name in ("parse", "translate", "build", "cache set", "first state",
                     "Envoy ready", "config ACKed", "first 200", "last 200"):
            if name in figures:
                print(f"  {name:<14} {figures[name]:8.2f} s  ({ref.ratio(figures[name])})")
        if args.process:
            await process_round(args, ref, echo_port, run)


async def process_round(args: argparse.Namespace, ref: Reference, echo_port: int, run: int
                        ) -> None:
    """One ``podway run`` in a child process, or with ``--compare`` one of each command
    (the order alternating between rounds), printed side by side."""
    commands: list[tuple[str, str | None]] = [("this", None)]
    if args.compare:
        commands.append(("compared", args.compare))
        if run % 2:
            commands.reverse()
    results = []
    for label, podway in commands:
        results.append((label, await one_process_run(args.routes, echo_port, podway)))
    print(f"run {run + 1}: {args.routes} routes, `podway run` in a child process, seconds "
          f"since its spawn ({', '.join(label for label, _ in results)}; load average "
          f"{os.getloadavg()[0]:.1f})", flush=True)
    names = [n for _, figures in results for n in figures]
    for name in dict.fromkeys(sorted(names, key=ORDER.index)):
        cells = []
        for _, figures in results:
            value = figures.get(name)
            cells.append("-" if value is None else f"{value:.0f}" if name == "fetch timeouts"
                         else f"{value:.2f} s ({ref.ratio(value)})")
        print(f"  {name:<18} " + "  |  ".join(f"{c:<22}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--echo", action="store_true",
                        help="members: podway echo in this process instead of nginx")
    parser.add_argument("--process", action="store_true",
                        help="also time `podway run` in a child process, from its spawn")
    parser.add_argument("--process-only", action="store_true",
                        help="only `podway run` in a child process (implies --process)")
    parser.add_argument("--compare", metavar="PODWAY", default="",
                        help="with --process: also time this podway command (another "
                        "checkout's venv/bin/podway), alternating, side by side")
    parser.add_argument("--until-listening", action="store_true",
                        help="with --process-only: no members; time each run until its Envoy "
                        "listens (a loaded machine)")
    parser.add_argument("--limit-s", type=float, default=120.0,
                        help="how long a route may take to answer 200 (a loaded machine)")
    parser.add_argument("--paths-per-host", type=int, default=xds_push.PATHS_PER_HOST,
                        help="Ingress paths per host (1: one host per route, every host a "
                        "scope of its own)")
    args = parser.parse_args()
    xds_push.PATHS_PER_HOST = args.paths_per_host
    global LIMIT_S, UNTIL_LISTENING
    LIMIT_S, UNTIL_LISTENING = args.limit_s, args.until_listening
    args.process |= args.process_only or bool(args.compare)
    if args.compare:  # its modules byte-compiled too, as this checkout's are (``compiled``)
        subprocess.run([str(Path(args.compare).parent / "python"), "-c",
                        "import compileall, pathlib, podway; compileall.compile_dir("
                        "pathlib.Path(podway.__file__).parent, quiet=1)"], check=True)
    ref = measure()
    print(ref.describe())
    asyncio.run(main_async(args, ref))
    print(ref.check_again())


if __name__ == "__main__":
    main()
