"""What holds an asyncio event loop for longer than a threshold, and where (a bench aid).

``StallWatch`` times every callback the loop runs (``asyncio.events.Handle._run``: task steps,
I/O callbacks, timers) and, while one runs, a sampler thread takes the loop thread's Python
stack every ``sample_s`` (``sys._current_frames``). A callback that ran longer than
``threshold_s`` is a *stall*: kept with when it began, how long it ran, what it was (the task's
name and coroutine, else the callback) and the stacks sampled inside it. ``report`` prints the
stalls of a time window grouped by what ran, with their most frequent stacks (trimmed to
Podway's and the libraries' frames), and which of them overlapped given windows (say, the
stage between an API write and its watch event): what a change waited for.

The sampler needs the GIL, so inside a long callback it gets a sample about every
``sys.getswitchinterval()`` (5 ms): a 20 ms stall has ~4 samples. Cost when the loop is idle:
one wake-up per ``sample_s``. For benchmarks only (``bench/convergence.py --stalls MS``):
never installed by Podway itself.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any


@dataclass(frozen=True, slots=True)
class Stall:
    began: float  # perf_counter
    seconds: float
    what: str
    stacks: tuple[tuple[str, ...], ...]  # sampled inside it, innermost frame last


@dataclass
class StallWatch:
    threshold_s: float = 0.005
    sample_s: float = 0.001
    stalls: list[Stall] = field(default_factory=list)
    _current: int = 0  # number of the callback running now (0: none)
    _samples: list[tuple[str, ...]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _original: Any = None

    def start(self) -> None:
        """Patch ``Handle._run`` (every loop of this process) and start the sampler."""
        watch = self
        original = self._original = asyncio.events.Handle._run
        loop_thread = threading.get_ident()
        counter = 0

        def timed_run(handle: asyncio.Handle) -> None:
            nonlocal counter
            counter += 1
            watch._current, watch._samples = counter, []
            began = time.perf_counter()
            try:
                original(handle)
            finally:
                seconds = time.perf_counter() - began
                watch._current = 0
                if seconds >= watch.threshold_s:
                    watch.stalls.append(Stall(began, seconds, describe(handle),
                                              tuple(watch._samples)))

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._sample, args=(loop_thread,),
                                        name="stall-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._original is not None:
            asyncio.events.Handle._run = self._original  # type: ignore[method-assign]
            self._original = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _sample(self, loop_thread: int) -> None:
        while not self._stop.wait(self.sample_s):
            running = self._current
            if not running:
                continue
            frame = sys._current_frames().get(loop_thread)
            if frame is not None and self._current == running:
                self._samples.append(_stack(frame))

    def within(self, start: float, end: float) -> list[Stall]:
        """Stalls that overlap ``[start, end]``."""
        return [s for s in self.stalls if s.began < end and s.began + s.seconds > start]

    def report(self, start: float, end: float, *,
               waits: dict[str, list[tuple[float, float]]] | None = None,
               top: int = 8, depth: int = 6) -> None:
        """Print the stalls inside ``[start, end]`` grouped by what ran; with ``waits``
        (stage name → windows), how many windows of each stage a stall overlapped and how
        long the overlap was in all."""
        stalls = self.within(start, end)
        span = max(end - start, 1e-9)
        held = sum(s.seconds for s in stalls)
        print(f"  loop stalls ≥ {self.threshold_s * 1000:.0f} ms during the tries: {len(stalls)}"
              f", {held * 1000:.0f} ms in all ({held / span:.0%} of the time)", flush=True)
        groups: dict[str, list[Stall]] = collections.defaultdict(list)
        for stall in stalls:
            groups[stall.what].append(stall)
        ranked = sorted(groups.items(), key=lambda g: -sum(s.seconds for s in g[1]))
        for what, found in ranked[:top]:
            times = sorted(s.seconds * 1000 for s in found)
            print(f"    {what}: {len(found)}, {sum(times):.0f} ms in all, p50 "
                  f"{times[len(times) // 2]:.0f} / max {times[-1]:.0f} ms", flush=True)
            stacks = collections.Counter(s[-depth:] for f in found for s in f.stacks)
            total = sum(stacks.values())
            for stack, n in stacks.most_common(3):
                print(f"      {n}/{total} samples: {' > '.join(stack)}", flush=True)
        for stage, windows in (waits or {}).items():
            hit: dict[str, list[float]] = collections.defaultdict(list)
            inside: collections.Counter[tuple[str, ...]] = collections.Counter()
            tries = 0
            for a, b in windows:
                overlapping = [s for s in stalls  # by 1 ms or more: not a shared edge
                               if min(b, s.began + s.seconds) - max(a, s.began) >= 0.001]
                tries += bool(overlapping)
                for s in overlapping:
                    hit[s.what].append(min(b, s.began + s.seconds) - max(a, s.began))
                    inside.update(stack[-depth:] for stack in s.stacks)
            print(f"    stalls inside '{stage}' of a try: {tries} of {len(windows)} tries"
                  + "".join(f"; {what} x{len(o)} ({sum(o) * 1000:.0f} ms)"
                            for what, o in sorted(hit.items(), key=lambda h: -sum(h[1]))[:4]),
                  flush=True)
            total = sum(inside.values())
            for stack, n in inside.most_common(3):
                print(f"      {n}/{total} samples: {' > '.join(stack)}", flush=True)


def describe(handle: asyncio.Handle) -> str:
    """A task's name and coroutine, else the callback's qualified name."""
    callback: Any = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro: Any = owner.get_coro()
        name = getattr(coro, "__qualname__", type(coro).__name__)
        return f"task {owner.get_name()} ({name})"
    name = getattr(callback, "__qualname__", None) or type(callback).__name__
    return f"callback {name}" + (f" of {type(owner).__name__}" if owner is not None else "")


_SKIP = ("/asyncio/", "loopstalls.py")


def _stack(frame: FrameType) -> tuple[str, ...]:
    out: list[str] = []
    for f in _frames(frame):
        path = f.f_code.co_filename
        if any(s in path for s in _SKIP):
            continue
        where = path.rsplit("/src/", 1)[-1].rsplit("site-packages/", 1)[-1].rsplit("/", 1)[-1] \
            if "/podway/" not in path else "podway/" + path.rsplit("/podway/", 1)[-1]
        out.append(f"{where}:{f.f_code.co_name}:{f.f_lineno}")
    out.reverse()
    return tuple(out)


def _frames(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def windows(starts: Iterable[float], ends: Iterable[float]) -> list[tuple[float, float]]:
    return list(zip(starts, ends, strict=True))
