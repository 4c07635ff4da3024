"""A restarted Podway must send a reconnecting engine nothing new for an unchanged cluster
state: two processes translating the same objects give every resource the same version.
Different hash seeds change the order of sets and of dicts filled from them, the usual way a
second process differs from the first (a listener or cluster whose bytes differ is replaced
by Envoy, which drains its connections)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .test_translate_golden import CASES
from .versions import XDS_CASES

ROOT = Path(__file__).resolve().parents[2]


def _versions(seed: str) -> dict[str, dict[str, dict[str, str]]]:
    done = subprocess.run([sys.executable, "-m", "tests.golden.versions"], cwd=ROOT,
                          env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, dict[str, dict[str, str]]] = json.loads(done.stdout)
    return out


def test_every_golden_case_gets_the_same_versions_in_another_process() -> None:
    first, second = _versions("1"), _versions("2")
    assert len(first) == len(CASES) + len(XDS_CASES)  # every case was built
    differing = {case: {t: sorted(n for n in first[case][t]
                                  if first[case][t][n] != second[case].get(t, {}).get(n))
                        for t in first[case]}
                 for case in first if first[case] != second.get(case)}
    assert differing == {}
