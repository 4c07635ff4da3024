"""Statuses at scale: the controller's first status pass against the API emulator, and its cost.

The emulator runs in a child process, filled as ``bench/convergence.py`` fills it (one Gateway,
N HTTPRoutes, N Services + EndpointSlices; ``convergence.serve_emulator``). The controller runs
in this process (no engine: statuses come from the translation), and its first status pass, the
one that writes every route's ``parents`` and the Gateway's ``attachedRoutes``, is timed:

* wall time of the pass (``StatusWriter.write`` of the first state that writes), and the
  PATCHes it sent (one per object whose status is due: the pass's targets are a set), against
  the objects that carry a status here (N routes, the Gateway and its GatewayClass);
* CPU seconds during the pass of the controller (this process: ``time.process_time``) and of the
  emulator (its ``/proc`` utime+stime): on one shared machine the two compete, so the pass's
  wall time can be the emulator's as much as the controller's. A real API server does the same
  work in Go (and etcd), so the controller's CPU is the part that is Podway's;
* with ``--profile``: where the controller's CPU of the pass went (cProfile, top functions).

Sizes alternate with ``--rounds`` (all sizes once per round), so a busy spell of the shared
machine lands on each. With ``--before SRC`` each size of each round runs on another source tree
too (e.g. an older commit's ``src`` from ``git archive``: its controller and its emulator), each
in a fresh process, the two trees taking turns to go first, and a closing table puts the pairs
side by side. With ``--spy PREFIX`` py-spy samples both processes over the pass (CPU time only,
``PREFIX-controller.txt`` and ``PREFIX-emulator.txt``, collapsed stacks). No target
is asserted; issue 24's are ≤ 1 s at 1,000 routes and ≤ 3 s at 10,000. Every time is also printed
as a ratio to the machine-speed reference (``speedref``), with the load average beside it.

    python bench/statuses.py [--sizes 1000,10000] [--rounds 1] [--profile] [--before SRC]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import signal
import sys
import time
from pathlib import Path

from kubernetes_asyncio import client

sys.path.insert(0, str(Path(__file__).parent))
import speedref
from convergence import start_emulator
from xds_push import free_port

from podway.pipeline import State
from podway.programs.controller.main import Controller, ControllerOptions
from podway.programs.gc_policy import GcPolicy
from podway.translate import TranslateOptions

try:
    from podway.kube.client import without_env_lookups
except ImportError:  # a commit before it (side-by-side runs): the client as it was
    def without_env_lookups(api: client.ApiClient) -> bool:
        return False


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


async def spy(pid: int, out: str) -> asyncio.subprocess.Process:
    """py-spy sampling ``pid`` (on-CPU samples only) into ``out`` until it is sent SIGINT."""
    return await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid), "--format",
        "raw", "--rate", "250", "--nonblocking", "-o", out,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)


async def start_spies(prefix: str, emulator: int) -> list[asyncio.subprocess.Process]:
    spies = [await spy(os.getpid(), f"{prefix}-controller.txt"),
             await spy(emulator, f"{prefix}-emulator.txt")]
    await asyncio.sleep(0.5)  # attached
    return spies


async def stop_spies(spies: list[asyncio.subprocess.Process]) -> None:
    for process in spies:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)
        await process.wait()
    spies.clear()


async def one(count: int, ref: speedref.Reference, profile: bool,
              spy_prefix: str | None = None) -> dict[str, float]:
    child = await start_emulator(count, free_port(), free_port())
    api: client.ApiClient | None = None
    task: asyncio.Task[None] | None = None
    try:
        assert child.stdout is not None
        url = (await child.stdout.readline()).decode().strip()
        api = client.ApiClient(client.Configuration(host=url))
        without_env_lookups(api)  # as podway.kube.client.connect does
        controller = Controller(ControllerOptions(
            translate=TranslateOptions(address="127.0.0.1"), xds_address="127.0.0.1:0",
            xds_unauthenticated=True, lb_address="127.0.0.1", gc=GcPolicy()), api=api)
        began = time.perf_counter()
        task = asyncio.create_task(controller.run())
        await controller.started.wait()
        assert controller.status is not None
        writer = controller.status
        done: asyncio.Future[dict[str, float]] = asyncio.get_running_loop().create_future()
        original = writer.write
        profiler = cProfile.Profile() if profile else None

        spies: list[asyncio.subprocess.Process] = []

        async def timed(state: State) -> int:
            if spy_prefix is not None and not done.done() and not spies:
                spies.extend(await start_spies(spy_prefix, child.pid))
            wall, cpu, emu = time.perf_counter(), time.process_time(), cpu_s(child.pid)
            if profiler is not None and not done.done():
                profiler.enable()
            written = await original(state)
            if profiler is not None:
                profiler.disable()
            figures = {"wall": time.perf_counter() - wall,
                       "controller CPU": time.process_time() - cpu,
                       "emulator CPU": cpu_s(child.pid) - emu,
                       "PATCHes": written, "since start": time.perf_counter() - began,
                       "CPU at start": cpu}
            await stop_spies(spies)
            if written and not done.done():
                done.set_result(figures)
            return written

        writer.write = timed  # type: ignore[method-assign]
        figures = await asyncio.wait_for(done, 600)
        # The pass's own watch events (each PATCH read back) come during and after it: the
        # controller's CPU until it is quiet again counts them too.
        await quiet()
        figures["CPU until quiet"] = time.process_time() - figures.pop("CPU at start")
        figures["echoes"] = float(getattr(controller.source, "echoes", -1))
        report(count, figures, ref, profiler)
        return figures
    finally:
        await stop(task, api, child)


async def stop(task: asyncio.Task[None] | None, api: client.ApiClient | None,
               child: asyncio.subprocess.Process) -> None:
    """The controller, its client and the emulator, whatever state they are in."""
    if task is not None:
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


async def quiet() -> None:
    """Until this process used under 10 ms of CPU in each of two 250 ms spells."""
    calm = 0
    while calm < 2:
        before = time.process_time()
        await asyncio.sleep(0.25)
        calm = calm + 1 if time.process_time() - before < 0.01 else 0


def report(count: int, figures: dict[str, float], ref: speedref.Reference,
           profiler: cProfile.Profile | None) -> None:
    print(f"== {count} HTTPRoutes + Services + EndpointSlices, one Gateway "
          f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    print(f"  first status pass: {figures['PATCHes']:.0f} PATCHes for {count + 2} objects "
          "with a status (routes, Gateway, GatewayClass)", flush=True)
    print(f"  our writes read back and not parsed: {figures['echoes']:.0f}"
          " (-1: this commit cannot tell)", flush=True)
    for name in ("wall", "controller CPU", "CPU until quiet", "emulator CPU", "since start"):
        seconds = figures[name]
        print(f"  {name:<16} {seconds * 1000:8.0f} ms  ({ref.ratio(seconds)})", flush=True)
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        print(text.getvalue())


SHOWN = ("wall", "controller CPU", "emulator CPU", "CPU until quiet", "PATCHes")


async def in_tree(src: str, count: int, profile: bool) -> dict[str, float]:
    """One pass of ``count`` routes by the controller and emulator of the tree ``src`` (a
    fresh process; its report is printed as it comes, its figures returned)."""
    env = {**os.environ, "PYTHONPATH": src}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--sizes", str(count), "--child",
        *(["--profile"] if profile else []), stdout=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None
    figures: dict[str, float] = {}
    async for line in proc.stdout:
        text = line.decode()
        if text.startswith("FIGURES "):
            figures = json.loads(text.removeprefix("FIGURES "))
        else:
            print(text, end="", flush=True)
    if await proc.wait() != 0 or not figures:
        raise SystemExit(f"the pass in {src} failed")
    return figures


async def main_async(args: argparse.Namespace, ref: speedref.Reference) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.before is None:
        for _ in range(args.rounds):
            for count in sizes:
                figures = await one(count, ref, args.profile, args.spy)
                if args.child:
                    print("FIGURES " + json.dumps(figures), flush=True)
        return
    trees = (("before", args.before), ("this tree", args.here))
    pairs: list[tuple[int, int, str, dict[str, float]]] = []
    for round_no in range(1, args.rounds + 1):
        for count in sizes:
            for name, src in trees if round_no % 2 else trees[::-1]:
                print(f"-- round {round_no}, {name} ({src})", flush=True)
                pairs.append((round_no, count, name, await in_tree(src, count, args.profile)))
    print("side by side (seconds; x ref in each report above):")
    print(f"  {'size':>6} {'round':>5} {'tree':<10} " + " ".join(f"{n:>16}" for n in SHOWN))
    for round_no, count, name, figures in pairs:
        print(f"  {count:>6} {round_no:>5} {name:<10} "
              + " ".join(f"{figures.get(n, float('nan')):>16.3f}" if n != "PATCHes"
                         else f"{figures.get(n, 0):>16.0f}" for n in SHOWN))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--before", help="another source tree's src, run first for each size")
    parser.add_argument("--spy", metavar="PREFIX", help="py-spy both processes over the pass")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.here = str(Path(__file__).resolve().parent.parent / "src")
    if args.before is not None:
        args.before = str(Path(args.before).resolve())
    ref = speedref.measure()
    print(ref.describe(), "(machine shared with other engineers: compare within one run)")
    asyncio.run(main_async(args, ref))
    print(ref.check_again())


if __name__ == "__main__":
    main()
