"""One lab for the whole module (building it costs seconds): four nodes, the seed example
applied, torn down by ``podway lab down`` even when a test fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from podway.programs.agent.netns import single_thread
from podway.programs.lab.api import LabApi
from podway.programs.lab.state import LabState
from podway.programs.lab.traffic import Reply, Target, parse_url, request

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "examples" / "seed-httpd"
T = TypeVar("T")


def lab_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def eventually(check: Callable[[], T | None], *, within: float = 60.0,
               what: str = "condition", explain: Callable[[], str] | None = None) -> T:
    """Poll ``check`` (20 ms apart) until it returns something truthy; fail after ``within``
    (with ``explain()`` in the message: what the lab looked like)."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}"
                                 + (f"\n{explain()}" if explain else ""))
        time.sleep(0.02)


@dataclass
class RunningLab:
    name: str
    state: LabState
    client: ThreadPoolExecutor

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "podway", "lab", *args, "--name",
                               self.name, "--state-dir", str(self.state.root)],
                              capture_output=True, text=True, check=False, timeout=120)
        if check and done.returncode != 0:
            raise AssertionError(f"podway lab {' '.join(args)}: {done.stderr}")
        return done

    def wait(self, check: Callable[[], T | None], *, what: str, within: float = 60.0) -> T:
        """``eventually``, explaining the lab's state when it times out."""
        return eventually(check, what=what, within=within, explain=self.explain)

    def explain(self) -> str:
        """What the lab looks like now: status and the tail of the daemon's and agents' logs."""
        out = [self.cli("status", check=False).stdout]
        for log in sorted(self.state.logs.glob("*.log")):
            if log.name.startswith(("daemon", "agent", "controller")):
                out.append(f"--- {log.name}\n{log.read_text()[-1200:]}")
        return "\n".join(out)

    @property
    def api(self) -> LabApi:
        return LabApi.of(self.state)

    def pods(self) -> list[dict[str, Any]]:
        return self.api.list(self.api.kind("pods"), "default")

    def ask(self, url: str, *, host: str = "") -> Reply:
        target: Target = parse_url(url)
        return self.client.submit(request, target, host_header=host).result()

    def spread(self, url: str, n: int, *, host: str = "") -> Counter[str]:
        """Which pods answered ``n`` requests (``"failed"`` counts failures)."""
        out: Counter[str] = Counter()
        for _ in range(n):
            reply = self.ask(url, host=host)
            out[str(reply.echo().get("pod")) if reply.ok else "failed"] += 1
        return out

    def ready_pods(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.pods()
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (p.get("status") or {}).get("conditions") or [])}

    def npl(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        raw = (pod["metadata"].get("annotations") or {}).get("nodeportlocal.antrea.io")
        return json.loads(raw) if raw else []


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningLab]:
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    name = f"t{uuid.uuid4().hex[:6]}"
    state = LabState(tmp_path_factory.mktemp("lab") / "state")
    running = RunningLab(name=name, state=state, client=ThreadPoolExecutor(1))
    try:
        running.cli("up", "--nodes", "4")
        running.client = single_thread(netns=f"pwlab-{name}-client", name="lab-test")
        running.cli("apply", "-f", str(SEED))
        eventually(lambda: len(running.ready_pods()) == 4, what="4 ready pods")
        eventually(lambda: all(running.npl(p) for p in running.pods()),
                   what="NodePortLocal annotations")
        yield running
    finally:
        running.client.shutdown()
        running.cli("down", check=False)
