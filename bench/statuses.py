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
machine lands on each. No target is asserted; issue 24's are ≤ 1 s at 1,000 routes and ≤ 3 s at
10,000. Every time is also printed as a ratio to the machine-speed reference (``speedref``).

    python bench/statuses.py [--sizes 1000,10000] [--rounds 1] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
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


async def one(count: int, ref: speedref.Reference, profile: bool) -> None:
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

        async def timed(state: State) -> int:
            wall, cpu, emu = time.perf_counter(), time.process_time(), cpu_s(child.pid)
            if profiler is not None and not done.done():
                profiler.enable()
            written = await original(state)
            if profiler is not None:
                profiler.disable()
            if written and not done.done():
                done.set_result({"wall": time.perf_counter() - wall,
                                 "controller CPU": time.process_time() - cpu,
                                 "emulator CPU": cpu_s(child.pid) - emu,
                                 "PATCHes": written, "since start": time.perf_counter() - began,
                                 "CPU at start": cpu})
            return written

        writer.write = timed  # type: ignore[method-assign]
        figures = await asyncio.wait_for(done, 600)
        # The pass's own watch events (each PATCH read back) come during and after it: the
        # controller's CPU until it is quiet again counts them too.
        await quiet()
        figures["CPU until quiet"] = time.process_time() - figures.pop("CPU at start")
        figures["echoes"] = float(getattr(controller.source, "echoes", -1))
        report(count, figures, ref, profiler)
    finally:
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
    print(f"== {count} HTTPRoutes + Services + EndpointSlices, one Gateway", flush=True)
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


async def main_async(args: argparse.Namespace, ref: speedref.Reference) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    for _ in range(args.rounds):
        for count in sizes:
            await one(count, ref, args.profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    ref = speedref.measure()
    print(ref.describe(), "(machine shared with other engineers: compare within one run)")
    asyncio.run(main_async(args, ref))
    print(ref.check_again())


if __name__ == "__main__":
    main()
