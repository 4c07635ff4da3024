"""The three backend modes side by side on a throw-away lab: builds a 4-node lab (the seed
example: 4 pods on 3 nodes, a fourth node without pods), runs ``podway lab compare`` and prints
per mode the p50/p99 per new connection, the share per pod, the client address kept, second
hops and requests sent to the pod-less node; then the NodePortLocal-minus-ClusterIP p50 (target:
<= 5 us; one nftables map DNAT costs 1-2 us). Always removes the lab. Needs root.

    .venv/bin/python bench/lab_modes.py [--requests 500]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lab(*args: str, name: str, state: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "podway", "lab", *args, "--name", name,
                           "--state-dir", str(state)], capture_output=True, text=True,
                          check=False, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"podway lab {args[0]}: {done.stderr.strip()}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("lab_modes: needs root (network namespaces); skipped")
        return
    name = f"b{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        try:
            lab("up", "--nodes", "4", name=name, state=state)
            lab("apply", "-f", str(ROOT / "examples" / "seed-httpd"), name=name, state=state)
            deadline = time.monotonic() + 60
            while True:  # ready pods with their NodePortLocal ports
                pods = json.loads(lab("get", "pods", "-o", "json", name=name, state=state))
                if len(pods["items"]) == 4 and all(
                        "nodeportlocal.antrea.io" in (p["metadata"].get("annotations") or {})
                        and any(c["type"] == "Ready" and c["status"] == "True"
                                for c in p["status"].get("conditions", []))
                        for p in pods["items"]):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("lab_modes: the seed pods did not become ready")
                time.sleep(0.2)
            report = json.loads(lab("compare", "--requests", str(args.requests), "--json",
                                    name=name, state=state))
        finally:
            subprocess.run([sys.executable, "-m", "podway", "lab", "down", "--name", name,
                            "--state-dir", str(state)], capture_output=True, check=False)
    print(f"{args.requests} requests per mode; nodes without a pod: "
          f"{', '.join(report['nodes_without_pod']) or 'none'}")
    print(f"{'mode':18} {'p50 us':>8} {'p99 us':>9} {'client IP':>9} {'2nd hop':>8} "
          f"{'to empty':>8}  share per pod")
    for mode in report["modes"]:
        share = " ".join(f"{v * 100:.0f}%" for v in mode["share"].values())
        print(f"{mode['mode']:18} {mode['p50_us']:>8} {mode['p99_us']:>9} "
              f"{mode['client_ip_seen'] * 100:>8.0f}% {mode['crossed_nodes']:>8} "
              f"{mode['sent_to_node_without_pod']:>8}  {share}")
    print(f"nodeportlocal p50 - clusterip p50: {report['npl_minus_clusterip_p50_us']} us "
          "(target <= 5 us)")


if __name__ == "__main__":
    main()
