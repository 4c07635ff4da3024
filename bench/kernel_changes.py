"""Kernel engine: new connections refused across table changes, per way of making a change.

Namespaces of the kernel engine's netns tests (tests/integration/kernel/kernelbed.py: a client,
the engine host, two ``podway echo`` backends). The table serves the VIP over both members;
while two clients open new TCP connections back to back, this script changes the table as
fast as libnftables takes it (in-process, in the engine's namespace), in one of three ways:

    full   each change replaces the whole table (the engine's first write; every change before)
    one    in place, in one transaction: new chains and maps, the maps switched to them, the
           old ones deleted (``ruleset.update``'s three steps as one transaction)
    steps  in place, in three transactions (``ruleset.update``, what the engine does): the
           new chains, then the switch, then the old generation deleted

An input-hook counter in the engine namespace counts SYNs to the VIP that reached the host
without DNAT: each is a connection the host refuses. Modes are interleaved round by round.

    sudo .venv/bin/python bench/kernel_changes.py --rounds 2 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).parent), str(ROOT / "tests" / "integration" / "kernel"),
                str(ROOT)]
from kernel_bed import interleaved  # noqa: E402
from kernelbed import BACKENDS, CLIENT, VIP, Bed, sh  # type: ignore[import-not-found]  # noqa: E402
from speedref import measure  # noqa: E402

from podway.kernel import ruleset  # noqa: E402
from podway.kernel.plan import Backend, Service  # noqa: E402
from podway.programs.agent.rules.libnft import LibNftables  # noqa: E402

PROBE = ("table ip podway_probe {\n  chain input { type filter hook input priority 0; "
         f"ip daddr {VIP} tcp dport 80 counter; }}\n}}")
SERVICES = (Service(name="web", address=VIP, port=80, protocol="tcp", affinity=False,
                    transparent=False, pools=("p",),
                    backends=tuple(Backend(far, 8080) for _, far in BACKENDS.values())),)


def changes(mode: str, lib: LibNftables, seconds: float) -> int:
    """Change the table for ``seconds``; the number of changes made."""
    import time

    def run(text: str) -> None:
        lib._pool.submit(lib._run, text).result()

    holds = ruleset.Installed(SERVICES)
    end, made = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        made += 1
        if mode == "full":
            run(ruleset.full(SERVICES, gen=made))
            continue
        steps, holds = ruleset.update(holds, SERVICES)
        if mode == "one":
            run("".join(steps))
        else:
            for step in steps:
                run(step)
    return made


def round_(mode: str, seconds: float) -> dict[str, object]:
    bed = Bed(Path(tempfile.mkdtemp(prefix="pwkc")))
    try:
        bed.open()
        for name in BACKENDS:
            bed.echo(name)
        sh("nft", "-f", "-", ns=bed.engine, stdin=ruleset.full(SERVICES))
        sh("nft", "-f", "-", ns=bed.engine, stdin=PROBE)
        lib = LibNftables(netns=bed.engine)
        clients = [subprocess.Popen(["ip", "netns", "exec", bed.client, sys.executable, CLIENT,
                                     "loop", VIP, "80", str(seconds)], stdout=subprocess.PIPE,
                                    text=True) for _ in range(2)]
        try:
            made = changes(mode, lib, seconds - 0.5)
        finally:
            lib.close()
        results = [json.loads(c.communicate(timeout=120)[0]) for c in clients]
        probe = sh("nft", "list", "table", "ip", "podway_probe", ns=bed.engine)
        return {"mode": mode, "changes": made, "connections": sum(r["ok"] for r in results),
                "refused": sum(r["failed"] for r in results),
                "undnatted_syns": int(probe.split("packets ")[1].split()[0])}
    finally:
        bed.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--modes", default="full,one,steps")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 1
    ref = measure()
    print(ref.describe())
    print(f"load average {os.getloadavg()[0]:.1f}: the machine is shared; compare within a run")
    totals: dict[str, list[int]] = {}
    for _, mode in interleaved(tuple(args.modes.split(",")), args.rounds):
        got = round_(mode, args.seconds)
        print(json.dumps(got), flush=True)
        total = totals.setdefault(mode, [0, 0, 0])
        for i, key in enumerate(("changes", "connections", "refused")):
            total[i] += int(str(got[key]))
    for mode, (made, conns, refused) in totals.items():
        print(f"{mode:5} {made:7} changes {conns:7} connections {refused:3} refused")
    print(ref.check_again())
    return 0


if __name__ == "__main__":
    sys.exit(main())
