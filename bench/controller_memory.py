"""Where the controller's memory goes: the real ``podway controller`` command, split by layer.

Runs ``podway controller`` against the API emulator filled as ``bench/convergence.py`` fills it
(N Services + EndpointSlices + HTTPRoutes on one Gateway; no Envoy, so no xDS stream state),
in a child process that is the command itself plus a small hook (below). Once every route's
status is written the parent signals the child, and the child prints:

* VmRSS at three points: the bare interpreter, after the command's imports (the CLI with every
  sub-command registered, ``podway.programs.controller.main``), and now; plus the peak (VmHWM);
* how much of ``now`` Python's allocators hold (pymalloc arenas, and glibc's heap in use vs
  kept), so fragmentation shows as the difference;
* the objects reachable from each layer, counted once each, in this order (a layer's figure is
  what the layers before it did not already count): the snapshot (typed objects), the kube
  source (informers' known versions, statuses kept aside, the coalescing state), the IR, the
  translator's memos, the builder's encodings, the xDS cache, the status writer (its last
  document included), the rest of the controller; then every other object the collector
  tracks (modules' globals, classes, functions: the code's own share);
* the biggest object types by count and bytes, and the modules loaded (sys.modules).

``--trace`` also starts ``tracemalloc`` in the child (at its first line: RSS is then larger
and not comparable) and prints the top allocation sites by line and by file.

Sizes are ``sys.getsizeof`` of each object (the object's own block: a dict's table, a
string's characters), not allocator overhead; they add up to less than RSS by the allocators'
slack and the interpreter's own memory.

    PYTHONPATH=src .venv/bin/python bench/controller_memory.py [--size 1000] [--trace]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import io
import os
import signal
import sys
import tempfile
import time
import types as pytypes
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

GW = "gateway.networking.k8s.io"
NS = "bench"


def vm(field: str, pid: int | str = "self") -> float:
    """A ``/proc/<pid>/status`` figure in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---- the child: the command plus a hook --------------------------------------------------
_SKIP = (type, pytypes.ModuleType, pytypes.FunctionType, pytypes.BuiltinFunctionType,
         pytypes.MethodType, pytypes.CodeType, pytypes.FrameType, pytypes.CoroutineType,
         pytypes.GeneratorType, pytypes.AsyncGeneratorType, asyncio.AbstractEventLoop,
         asyncio.Future, asyncio.Handle)


def walk(roots: Iterable[object], seen: set[int],
         sites: Counter[str] | None = None) -> tuple[int, int, Counter[str]]:
    """Objects reachable from ``roots`` not yet in ``seen`` (which grows): count, bytes, and
    bytes by type (and by allocation site into ``sites`` when tracemalloc traces). Code,
    modules, frames and the event loop are walls, not contents."""
    count = size = 0
    by_type: Counter[str] = Counter()
    if sites is not None:
        import tracemalloc
    stack = [r for r in roots if id(r) not in seen]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        n = sys.getsizeof(obj)
        count += 1
        size += n
        by_type[type(obj).__name__] += n
        if sites is not None:
            where = tracemalloc.get_object_traceback(obj)
            sites[f"{_short(where[0].filename)}:{where[0].lineno}" if where else "?"] += n
        stack.extend(r for r in gc.get_referents(obj) if id(r) not in seen)
    return count, size, by_type


def attributes(obj: object, seen: set[int]) -> list[tuple[str, int]]:
    """Bytes reachable from each attribute of ``obj`` (beyond ``seen``, which is left as it
    is), biggest first; attributes share objects, so these overlap and need not add up."""
    names = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        names += [n for n in getattr(cls, "__slots__", ()) if n not in names]
    sizes = []
    for name in names:
        value = getattr(obj, name, None)
        if value is not None and not isinstance(value, _SKIP):
            sizes.append((name.lstrip("_"), walk([value], set(seen))[1]))
    return sorted(sizes, key=lambda kv: -kv[1])


def instances(cls_names: set[str]) -> dict[str, list[object]]:
    found: dict[str, list[object]] = {}
    for obj in gc.get_objects():
        name = type(obj).__name__
        if name in cls_names:
            found.setdefault(name, []).append(obj)
    return found


def layers(controller: Any) -> Iterator[tuple[str, list[object]]]:
    """(label, roots) of each layer, in the order they are counted."""
    pipeline = controller.pipeline
    state = pipeline.state
    source = controller.source
    yield "snapshot (typed objects)", [state.update.snapshot]
    yield "kube source: informers, statuses kept, pending", [source]
    yield "IR", [state.result.ir]
    yield "translation result (statuses, problems, change)", [state.result]
    yield "translator (memos, last run)", [pipeline._translator]
    yield "builder (encodings, tables)", [pipeline._builder]
    yield "xDS cache (resources, versions)", [pipeline.cache]
    yield "status writer (last document, written)", [controller.status]
    yield "xDS server, readiness, groups, metrics, rest of the controller", [controller]


def malloc_figures() -> list[str]:
    lines = []
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")

        class Mallinfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost")]

        libc.mallinfo2.restype = Mallinfo2
        info = libc.mallinfo2()
        lines.append(f"  glibc heap: {(info.arena + info.hblkhd) / 2**20:.1f} MiB from the "
                     f"system ({info.hblkhd / 2**20:.1f} MiB mmapped blocks), "
                     f"{(info.uordblks + info.hblkhd) / 2**20:.1f} MiB in use, "
                     f"{info.fordblks / 2**20:.1f} MiB free in it")
    err = io.StringIO()
    fd = os.dup(2)
    with tempfile.TemporaryFile("w+") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(fd, 2)
            os.close(fd)
        tmp.seek(0)
        err.write(tmp.read())
    for line in err.getvalue().splitlines():
        if line.startswith(("# arenas allocated current", "# bytes in allocated blocks",
                            "# bytes in available blocks", "Total  ")):
            lines.append("  pymalloc " + " ".join(line.split()))
    return lines


marks_modules: set[str] = set()  # loaded by the command's imports (the child's mark)


def report(marks: dict[str, float], trace: bool) -> str:
    out = [f"  VmRSS: before the command's imports (interpreter, asyncio: the tool's own) "
           f"{marks['bare']:.1f} MiB, after the command's imports "
           f"{marks['imports']:.1f} MiB ({marks['imports_modules']:.0f} modules), now "
           f"{vm('VmRSS'):.1f} MiB ({len(sys.modules)} modules); peak {vm('VmHWM'):.1f} MiB"]
    later = sorted(m for m in sys.modules if m not in marks_modules)
    out.append(f"  modules first loaded while serving: {', '.join(later) or 'none'}")
    out += malloc_figures()
    gc.unfreeze()  # the frozen generation is not in gc.get_objects()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector would free: kept in gc.garbage
    gc.collect()
    gc.set_debug(0)
    garbage = sum(sys.getsizeof(o) for o in gc.garbage)
    out.append(f"  garbage waiting for the collector (cycles): {len(gc.garbage):,} objects, "
               f"{garbage / 2**20:.1f} MiB; freed now")
    gc.garbage.clear()
    controllers = instances({"Controller"}).get("Controller", [])
    if len(controllers) != 1:
        return "\n".join([*out, f"  expected one Controller, found {len(controllers)}"])
    seen: set[int] = set()
    seen.add(id(seen))  # the walk's own bookkeeping is not the controller's
    out.append("  reachable, counted once (sys.getsizeof), by layer:")
    total = 0
    for label, roots in layers(controllers[0]):
        sites: Counter[str] | None = Counter() if trace else None
        parts = attributes(roots[0], seen) if len(roots) == 1 else []
        count, size, by_type = walk(roots, seen, sites)
        total += size
        top = ", ".join(f"{t} {b / 2**20:.1f}" for t, b in by_type.most_common(5))
        out.append(f"    {size / 2**20:6.1f} MiB {count:9,} objects  {label}  [{top}]")
        if parts:
            out.append("        of which: " + ", ".join(
                f"{name} {b / 2**20:.2f}" for name, b in parts[:6]))
        if sites:
            out.append("        allocated at: " + ", ".join(
                f"{w} {b / 2**20:.2f}" for w, b in sites.most_common(6)))
    rest = [o for o in gc.get_objects() if id(o) not in seen]
    seen.add(id(rest))
    count, size, by_type = walk(rest, seen)
    code = sum(sys.getsizeof(o) for o in gc.get_objects()
               if isinstance(o, _SKIP) and not isinstance(o, asyncio.Future | asyncio.Handle))
    total += size + code
    top = ", ".join(f"{t} {b / 2**20:.1f}" for t, b in by_type.most_common(6))
    out.append(f"    {size / 2**20:6.1f} MiB {count:9,} objects  everything else the collector "
               f"tracks (globals, caches of libraries)  [{top}]")
    out.append(f"    {code / 2**20:6.1f} MiB               functions, classes, modules, code "
               "(their own blocks)")
    out.append(f"    {total / 2**20:6.1f} MiB in all")
    by_count = Counter(type(o).__name__ for o in gc.get_objects())
    out.append("  most numerous tracked types: " + ", ".join(
        f"{t} {n:,}" for t, n in by_count.most_common(12)))
    gc.freeze()
    if trace:
        import tracemalloc

        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)])
        out.append(f"  tracemalloc: {sum(s.size for s in snap.statistics('filename')) / 2**20:.1f}"
                   " MiB traced; top lines:")
        for stat in snap.statistics("lineno")[:30]:
            frame = stat.traceback[0]
            out.append(f"    {stat.size / 2**20:6.2f} MiB {stat.count:8,}  "
                       f"{_short(frame.filename)}:{frame.lineno}")
        out.append("  top files:")
        for stat in snap.statistics("filename")[:20]:
            out.append(f"    {stat.size / 2**20:6.2f} MiB  {_short(stat.traceback[0].filename)}")
    return "\n".join(out)


def _short(path: str) -> str:
    for cut in ("site-packages/", "/src/", "/lib/python3"):
        if cut in path:
            return path.split(cut, 1)[1]
    return path


def child(dump: str, trace: bool, argv: list[str]) -> None:
    """``podway <argv>`` with the hook: on SIGUSR1, write the report to ``dump``."""
    if trace:
        import tracemalloc

        tracemalloc.start(1)
    marks = {"bare": vm("VmRSS")}
    import typer

    import podway.programs.controller.main  # noqa: F401  (what the command imports before any object)
    from podway.cli.app import main
    from podway.cli.commands import register

    register(typer.Typer(), argv)  # the sub-command's imports, as ``main`` makes them
    marks["imports"] = vm("VmRSS")
    marks["imports_modules"] = len(sys.modules)
    marks_modules.update(sys.modules)

    def on_signal(*_: object) -> None:
        Path(dump).write_text(report(marks, trace) + "\n")
        os.kill(os.getpid(), signal.SIGTERM)  # then stop as the command stops

    signal.signal(signal.SIGUSR1, on_signal)
    sys.argv = ["podway", *argv]
    main()


# ---- the parent --------------------------------------------------------------------------
async def measure(count: int, trace: bool) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from convergence import start_emulator, stop_run, write_kubeconfig
    from kubernetes_asyncio import client
    from xds_push import free_port

    child_emu = await start_emulator(count, free_port(), free_port())
    proc: asyncio.subprocess.Process | None = None
    folder = Path(tempfile.mkdtemp(prefix="podway-mem-"))
    try:
        assert child_emu.stdout is not None
        url = (await child_emu.stdout.readline()).decode().strip()
        kubeconfig = write_kubeconfig(folder, url)
        dump = folder / "report"
        argv = ["controller", "--kubeconfig", str(kubeconfig),
                "--xds-listen", f"127.0.0.1:{free_port()}", "--xds-unauthenticated",
                "--backend-mode", "clusterip", "--address", "127.0.0.1",
                "--lb-address", "127.0.0.1", "--log-level", "warning",
                "--metrics-port", str(free_port()), "--metrics-address", "127.0.0.1"]
        began = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--child", str(dump), *(["--trace"] if trace else []),
            "--", *argv)
        async with client.ApiClient(client.Configuration(host=url)) as api:
            custom: Any = client.CustomObjectsApi(api)
            async with asyncio.timeout(900):
                while True:  # until the last route's status is written
                    obj = await custom.get_namespaced_custom_object(
                        GW, "v1", NS, "httproutes", f"r{count - 1}")
                    if (obj.get("status") or {}).get("parents"):
                        break
                    await asyncio.sleep(1)
        settled = time.perf_counter() - began
        await asyncio.sleep(5)  # the last status writes and their watch events
        rss = vm("VmRSS", proc.pid)
        proc.send_signal(signal.SIGUSR1)
        async with asyncio.timeout(600):
            await proc.wait()  # it reports, then stops
        print(f"== {count} Services + {count} HTTPRoutes: every status written after "
              f"{settled:.1f} s; VmRSS before the report {rss:.1f} MiB")
        print(dump.read_text(), end="", flush=True)
    finally:
        await stop_run(proc, child_emu, folder)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        trace = sys.argv[3] == "--trace"
        rest = sys.argv[4 if trace else 3:]
        child(sys.argv[2], trace, rest[1:] if rest[:1] == ["--"] else rest)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--trace", action="store_true",
                        help="also tracemalloc's top lines (RSS then not comparable)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores)", flush=True)
    asyncio.run(measure(args.size, args.trace))


if __name__ == "__main__":
    main()
