"""File-source stall benchmark: how long an unrelated small edit waits behind a big file.

Scenarios: a 20 MB file (2,000 Services with 10 KB annotations) and a 20,000-object file
(~3 MB). For each, the big file is written into a watched folder, and while it is being parsed
a one-object file is edited; the figure is the time from that edit to the update that carries
it (the stall), next to the big file's own time to appear and the worst event-loop lag seen
meanwhile. Resident memory is measured before, with and after a 20,000-object file. The big
files exceed the default ``LoadLimits`` (8 MiB, 10,000 objects per file), so the limits are
raised for these runs; the time the defaults take to refuse them is printed too.

Then parse speed: ``load_text`` of the 20,000-object text with libyaml (CSafeLoader, what
Podway uses) and with the pure-Python loader.

The cyclic collector is off (``--gc`` turns it on), as in ``podway run`` and the controller,
which settle the heap at quiet moments instead (``podway.programs.gc_policy``): with it on,
dropping 50,000 objects took seconds of collections inside the source's merge.

Every figure is also printed as a ratio to a fixed pure-Python workload timed in the same run
(``bench/speedref.py`` when present, else one of this script's own), because machine speed here
varies about 2x from day to day.

    python bench/source_stall.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from podway.model import Service
from podway.model import loader as loader_module
from podway.model.loader import LoadLimits, load_text
from podway.sources.base import SourceUpdate
from podway.sources.files import FileSource

SVC = """apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: bench
  annotations: {{note: "{pad}"}}
spec:
  ports: [{{port: {port}, targetPort: 8080}}]
"""
RAISED = LoadLimits(max_file_bytes=64 << 20, max_objects_per_file=50_000,
                    max_objects_total=200_000)


def own_reference_ms() -> float:
    """A fixed pure-Python workload (sorting, dict building, string work): the machine speed."""
    began = time.perf_counter()
    rng = random.Random(42)
    data = [rng.random() for _ in range(200_000)]
    data.sort()
    table = {f"k{i}": i * i for i in range(200_000)}
    text = ",".join(str(v) for v in list(table.values())[:100_000])
    assert text
    assert data[0] <= data[-1]
    return (time.perf_counter() - began) * 1000


def reference() -> tuple[float, str]:
    """(ms, what): the shared bench/speedref.py workload when present, else this file's own."""
    try:
        from speedref import measure  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        ms = statistics.median(own_reference_ms() for _ in range(5))
        return ms, "fixed pure-Python workload of this script"
    return measure().seconds * 1000, "fixed pure-Python workload, bench/speedref.py"


def big_text(objects: int, pad: int) -> str:
    return "---\n".join(SVC.format(name=f"big-{i}", pad="x" * pad, port=80)
                        for i in range(objects))


def _split(text: str, files: int) -> list[str]:
    """``text``'s documents in ``files`` consecutive parts."""
    docs = text.split("---\n")
    size = -(-len(docs) // files)
    return ["---\n".join(docs[i:i + size]) for i in range(0, len(docs), size)]


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident memory of this process, MB (Linux)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                  if ":" in line)
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)



def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def port(update: SourceUpdate, name: str) -> int | None:
    svc = update.snapshot.get(Service, "bench", name)
    return None if svc is None else svc.spec.ports[0].port


async def stall(text: str, runs: int, limits: LoadLimits, files: int = 1
                ) -> dict[str, float]:
    """Worst and median stall of a small edit behind ``text`` (split into ``files`` files);
    the big files' time; loop lag."""
    parts = _split(text, files)
    stalls: list[float] = []
    bigs: list[float] = []
    worst_lag = 0.0
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_atomically(root / "small.yaml", SVC.format(name="small", pad="", port=1))
        updates: asyncio.Queue[tuple[float, SourceUpdate]] = asyncio.Queue()
        source = FileSource(root, limits=limits)

        async def pump() -> None:
            async for update in source.watch():
                updates.put_nowait((time.perf_counter(), update))

        async def ticker() -> None:
            nonlocal worst_lag
            while True:
                began = time.perf_counter()
                await asyncio.sleep(0.005)
                worst_lag = max(worst_lag, time.perf_counter() - began - 0.005)

        async def until(name: str, value: int | None) -> float:
            while True:
                at, update = await updates.get()
                if port(update, name) == value:
                    return at

        last = f"big-{text.count('name: big-') - 1}"  # in the last file: all are in by then
        tasks = [asyncio.create_task(pump()), asyncio.create_task(ticker())]
        try:
            await until("small", 1)
            for run in range(runs):
                began = time.perf_counter()
                for i, part in enumerate(parts):
                    write_atomically(root / f"big-{i}.yaml", part)
                await asyncio.sleep(0.1)  # the big files' events are in, their parse under way
                edited = time.perf_counter()
                write_atomically(root / "small.yaml",
                                 SVC.format(name="small", pad="", port=100 + run))
                stalls.append(await until("small", 100 + run) - edited)
                bigs.append(await until(last, 80) - began)
                for i in range(len(parts)):
                    (root / f"big-{i}.yaml").unlink()
                await until(last, None)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return {"stall_worst": max(stalls) * 1000, "stall_median": statistics.median(stalls) * 1000,
            "big_median": statistics.median(bigs) * 1000, "loop_lag_worst": worst_lag * 1000,
            }


async def memory(text: str) -> tuple[float, float, float]:
    """Resident MB before, with ``text`` loaded, and after its file is removed (one run)."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_atomically(root / "small.yaml", SVC.format(name="small", pad="", port=1))
        updates = FileSource(root, limits=RAISED).watch()
        try:
            await anext(updates)
            before = rss_mb()[0]
            write_atomically(root / "big.yaml", text)
            while port(await anext(updates), "big-0") is None:
                pass
            loaded = rss_mb()[0]
            (root / "big.yaml").unlink()
            while port(await anext(updates), "big-0") is not None:
                pass
            await asyncio.sleep(0.5)  # the trim runs off the loop
            return before, loaded, rss_mb()[0]
        finally:
            await updates.aclose()


def refusal_ms(text: str) -> float | None:
    """How long the default limits take to refuse ``text``; None when they admit it."""
    began = time.perf_counter()
    result = load_text(text, source="big.yaml")
    if not result.errors:
        return None
    assert not result.objects
    return (time.perf_counter() - began) * 1000


def parse_ms(text: str, loader: type[yaml.SafeLoader]) -> float:
    saved = loader_module._Loader
    loader_module._Loader = loader
    try:
        began = time.perf_counter()
        result = load_text(text, limits=RAISED)
        assert not result.errors
        return (time.perf_counter() - began) * 1000
    finally:
        loader_module._Loader = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scenarios", default="",
                        help="only the scenarios whose label contains this text")
    parser.add_argument("--gc", action="store_true",
                        help="leave the cyclic collector on (podway run and the controller "
                             "turn it off and settle at quiet moments: programs/gc_policy.py)")
    args = parser.parse_args()
    if not args.gc:
        gc.disable()  # as the programs do while they serve
    print(f"cyclic garbage collector: {'on' if args.gc else 'off, as in podway run'}")
    ref, what = reference()
    print(f"machine-speed reference: {ref:.1f} ms ({what}; figures below also as x reference)")

    def show(label: str, ms: float) -> None:
        print(f"  {label:<46} {ms:9.1f} ms  ({ms / ref:6.2f} x reference)")

    text = big_text(20_000, 0)
    before, loaded, after = asyncio.run(memory(text))
    print(f"resident memory, 20,000-object file: {before:.0f} MB before, {loaded:.0f} MB "
          f"loaded, {after:.0f} MB after the file is removed")
    scenarios = {"20 MB file (2,000 objects of 10 KB)": (big_text(2_000, 10_000), 1),
                 "20,000-object file": (big_text(20_000, 0), 1),
                 "20,000 objects in 4 files": (big_text(20_000, 0), 4),
                 "50,000-object file": (big_text(50_000, 0), 1),
                 "50,000 objects in 4 files": (big_text(50_000, 0), 4)}
    for label, (text, files) in scenarios.items():
        if args.scenarios not in label:
            continue
        print(f"{label}: {len(text) / 1e6:.1f} MB")
        figures = asyncio.run(stall(text, args.runs, RAISED, files))
        show("small edit behind it, worst", figures["stall_worst"])
        show("small edit behind it, median", figures["stall_median"])
        show("the big file itself, median", figures["big_median"])
        show("event-loop lag, worst", figures["loop_lag_worst"])
        refused = refusal_ms(text) if files == 1 else None
        if refused is not None:
            show("refused by the default limits in", refused)
        elif files == 1:
            print("  admitted by the default limits")
    text = scenarios["20,000-object file"][0]
    show("load_text 20,000 objects, libyaml", parse_ms(text, loader_module._Loader))
    show("load_text 20,000 objects, pure Python", parse_ms(text, yaml.SafeLoader))


if __name__ == "__main__":
    main()
