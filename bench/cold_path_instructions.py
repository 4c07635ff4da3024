"""Instructions of the Python work before a cold start's clusters leave, a figure load does not
distort.

A cold start sends Envoy its clusters once the control plane has parsed every object and run
the structure phase (``podway.pipeline``: clusters first); until then Envoy waits, so every
instruction of that work is on the start's critical path (docs/performance.md, "Cold start").
Timed, those stages move 20-30 % between runs of the same code on this project's VMs (the
CPU-seconds too); counted, they do not. The stages run in a child process under Valgrind's
callgrind with instrumentation off, and each is counted alone (``callgrind_control``: counters
zeroed, instrumentation on, the stage, off, a dump named after it):

* parse:     ``parse_object`` of every object of ``bench/convergence.py``'s world as a LIST
             delivers it (N Services, N EndpointSlices, N HTTPRoutes, one Gateway and class);
* structure: ``IncrementalTranslator.first_pools`` of that snapshot (what the clusters wait for);
* clusters:  ``Builder.clusters_of`` of its pools (encoding them);
* members:   the ``update`` that follows (members resolved: the load assignments wait for it).

Each stage runs once natively first (imports, compiled regexes), then counted. ``--compare SRC``
counts another checkout's ``src`` the same way (its ``PYTHONPATH``), printed side by side with
this checkout's; the counts are exact, so one run of each is enough.

    python bench/cold_path_instructions.py [--routes 1000] [--compare ../base/src]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STAGES = ("parse", "structure", "clusters", "members")
SRC = Path(__file__).resolve().parent.parent / "src"


def child(routes: int) -> None:
    """The stages, each counted alone (run under callgrind by ``count``)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from translate import OPTS, convergence_cluster

    from podway.envoy.config import Builder
    from podway.model.loader import parse_object
    from podway.translate import IncrementalTranslator

    objects, snapshot = convergence_cluster(routes)
    raws = [json.loads(obj.model_dump_json(by_alias=True, exclude_none=True)) for obj in objects]
    gc.disable()  # as a serving process runs (podway.programs.gc_policy)

    def stages() -> dict[str, object]:
        translator, builder = IncrementalTranslator(OPTS), Builder()
        out: dict[str, object] = {}
        out["parse"] = lambda: [parse_object(raw) for raw in raws]
        out["structure"] = lambda: out.__setitem__("pools", translator.first_pools(snapshot))
        out["clusters"] = lambda: builder.clusters_of(out["pools"])  # type: ignore[arg-type]
        out["members"] = lambda: translator.update(snapshot)
        return out

    for name, stage in list(stages().items()):  # once natively: imports, regexes, caches
        if name in STAGES:
            stage()  # type: ignore[operator]
    counted = stages()
    for name in STAGES:
        _control("--zero")
        _control("--instr=on")
        counted[name]()  # type: ignore[operator]
        _control("--instr=off")
        _control(f"--dump={name}")


def _control(arg: str) -> None:
    subprocess.run(["callgrind_control", arg, str(os.getpid())], check=True,
                   capture_output=True)


def count(src: Path, routes: int) -> dict[str, int]:
    """Instructions per stage of the checkout whose ``src`` is ``src``."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(src)}
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                        f"--callgrind-out-file={tmp}/cg.%p", sys.executable, __file__,
                        "--child", str(routes)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out: dict[str, int] = {}
        for path in Path(tmp).iterdir():
            text = path.read_text(errors="replace")
            label = re.search(r"^desc: Trigger: dump (\S+)", text, re.M)
            total = re.search(r"^totals: (\d+)", text, re.M)
            if label and total and label.group(1) in STAGES:
                out[label.group(1)] = int(total.group(1))
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--routes", type=int, default=1000)
    parser.add_argument("--compare", type=Path, help="another checkout's src folder")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed (apt install valgrind)")
    targets = [("this", SRC)] + ([("compare", args.compare.resolve())] if args.compare else [])
    counts = {name: count(src, args.routes) for name, src in targets}
    print(f"instructions (callgrind) before a cold start's clusters leave, {args.routes} "
          "HTTPRoutes + Services + EndpointSlices; per route in brackets")
    head = "".join(f"{name:>24}" for name, _ in targets)
    print(f"  {'stage':<10}{head}" + ("   this / compare" if args.compare else ""))
    for stage in (*STAGES, "total"):
        values = [sum(c.values()) if stage == "total" else c.get(stage, 0)
                  for c in counts.values()]
        cells = "".join(f"{v / 1e6:>12.1f}M ({v / args.routes / 1e3:>6.0f}k)" for v in values)
        ratio = f"   {values[0] / values[1]:.3f}" if len(values) > 1 and values[1] else ""
        print(f"  {stage:<10}{cells}{ratio}", flush=True)


if __name__ == "__main__":
    main()
