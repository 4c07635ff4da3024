"""The API emulator's CPU per status write: what sets the wall time of a large status pass.

On two cores the controller and the emulator compete during the first status pass at 10,000
routes (``bench/statuses.py``), and the emulator used more CPU than the controller. A real API
server does that work in Go; the emulator's share is still ours to keep small, since the tests,
the benches and the lab run on it. This bench isolates it: the emulator runs in a child process
filled with N HTTPRoutes, one watch on them stays open (as the controller's informer), and this
process sends N status JSON merge patches of the shape the controller writes (one parent, two
conditions; 16 in flight), waiting until the watch delivered every event. Printed: the child's
CPU seconds (utime+stime from ``/proc``) over the writes, per write, and the wall time; with
``--profile`` the child's cProfile (CPU time) of the writes, top functions.

``--rounds`` repeats; with ``--before SRC`` each round also runs the emulator of another source
tree first (e.g. an older commit's ``src`` from ``git archive``), interleaved, so the two are
compared under the same load.

    python bench/emulator_writes.py [--writes 3000] [--rounds 3] [--before /tmp/old/src]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import speedref
from convergence import GW, NS, route


def child(count: int, profile: bool) -> None:
    import cProfile
    import pstats

    from podway.kube.emulator import KubeEmulator

    async def main() -> None:
        emu = KubeEmulator()
        url = await emu.start()
        emu.install_gateway_api()
        for i in range(count):
            emu.put("httproutes", route(i), group=GW)
        print(url, flush=True)
        profiler = cProfile.Profile(time.process_time)
        if profile:
            profiler.enable()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        profiler.disable()
        if profile:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        await emu.stop()

    asyncio.run(main())


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def status(i: int) -> dict[str, Any]:
    conditions = [{"type": kind, "status": "True", "reason": kind, "message": "",
                   "observedGeneration": 1, "lastTransitionTime": "2026-12-05T12:00:00Z"}
                  for kind in ("Accepted", "ResolvedRefs")]
    return {"status": {"parents": [{
        "parentRef": {"group": GW, "kind": "Gateway", "name": "edge", "namespace": NS},
        "controllerName": "podway.io/gateway-controller", "conditions": conditions}]}}


async def one(count: int, src: str | None, profile: bool) -> tuple[float, float, str]:
    import aiohttp

    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--child", str(count), *(["--profile"] if profile else []),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdin is not None
    url = (await proc.stdout.readline()).decode().strip()
    base = f"{url}/apis/{GW}/v1/namespaces/{NS}/httproutes"
    async with aiohttp.ClientSession() as session:
        async with session.get(base) as answer:
            version = (await answer.json())["metadata"]["resourceVersion"]
        heard = 0
        every = asyncio.Event()

        async def watch() -> None:
            nonlocal heard
            async with session.get(f"{base}?watch=1&resourceVersion={version}") as answer:
                async for line in answer.content:
                    json.loads(line)
                    heard += 1
                    if heard >= count:
                        every.set()

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.3)
        began_cpu, began = cpu_s(proc.pid), time.perf_counter()
        in_flight = asyncio.Semaphore(16)

        async def write(i: int) -> None:
            async with in_flight, session.patch(
                    f"{base}/r{i}/status", json=status(i),
                    headers={"Content-Type": "application/merge-patch+json"}) as answer:
                if answer.status != 200:
                    raise SystemExit(f"PATCH r{i}: {answer.status} {await answer.text()}")
                await answer.read()

        await asyncio.gather(*(write(i) for i in range(count)))
        await every.wait()
        cpu, wall = cpu_s(proc.pid) - began_cpu, time.perf_counter() - began
        watcher.cancel()
    proc.stdin.close()
    text = (await proc.stdout.read()).decode()
    await proc.wait()
    return cpu, wall, text


async def main_async(args: argparse.Namespace, ref: speedref.Reference) -> None:
    trees = ([("before", args.before)] if args.before else []) + [("this tree", None)]
    for round_ in range(args.rounds):
        for name, src in trees:
            cpu, wall, text = await one(args.writes, src, args.profile)
            print(f"round {round_ + 1}, {name}: {args.writes} status writes, emulator CPU "
                  f"{cpu:.2f} s ({cpu / args.writes * 1e6:.0f} µs per write, "
                  f"{ref.ratio(cpu)}), wall {wall:.2f} s", flush=True)
            if args.profile:
                print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", help="another source tree's src, run first in each round")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.profile)
        return
    ref = speedref.measure()
    print(ref.describe(), "(machine shared with other engineers: compare within one run)")
    asyncio.run(main_async(args, ref))
    print(ref.check_again())


if __name__ == "__main__":
    main()
