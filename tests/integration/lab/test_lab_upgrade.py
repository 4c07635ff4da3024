"""Issue 29.5: ``helm upgrade`` of the installed chart in place, under load, L4 and L7.

The chart is installed as ``test_lab_install`` installs it (``podway lab up --install``: the
image under runc, RBAC enforced); a LoadBalancer Service on port 80 (L4) and an Ingress of the
chart's class (L7, host-based, on its own VIP) are served through the chart's Envoy engine.
While a client in the lab's client namespace sends two steady streams of requests (a new
connection each), one to each VIP, ``podway lab upgrade`` runs ``helm upgrade`` of the release
with a changed ``podAnnotations`` value, which changes the pod template of every workload: the
controller pair (Lease hand-over), the engine Deployment and the agent DaemonSet. The test
waits until every workload has rolled (new pods Ready, old ones gone, Deployments Available,
the DaemonSet updated) and the new engine serves, and then requires that not one request of
either stream failed; each failure is recorded with its time and text."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from podway.programs.agent.netns import single_thread
from podway.programs.lab.install import NAMESPACE
from podway.programs.lab.traffic import parse_url, request
from tests.integration.lab.conftest import RunningLab, eventually
from tests.integration.lab.test_lab_install import (
    HOST,
    explain,
    installed,
    objects,
    serve_app,
    status,
)

pytestmark = [pytest.mark.e2e, pytest.mark.netns, pytest.mark.image,
              pytest.mark.timeout(1800)]
__all__ = ["installed"]  # the module's lab (a fixture shared with test_lab_install)


@pytest.fixture(scope="module")
def serving(installed: RunningLab, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[RunningLab, str, str]:
    """The installed lab with the app served (``APP``): the LoadBalancer Service on its VIP,
    port 80 (L4 through the engine's Envoy), and the Ingress of the chart's class on its own
    VIP, port 80 (L7, Host ``HOST``); the two URLs, each answered once."""
    lab = installed
    eventually(lambda: rolled(lab), within=300, what="the chart's workloads available",
               explain=lambda: explain(lab))
    l4, l7 = (f"http://{a}/" for a in serve_app(lab, tmp_path_factory.mktemp("app")))
    for url, host in ((l4, ""), (l7, HOST)):
        eventually(lambda u=url, h=host: lab.client.submit(  # type: ignore[misc]
            request, parse_url(u), host_header=h).result().ok, within=120,
            what=f"a 200 through {url} {host}", explain=lambda: explain(lab))
    return lab, l4, l7


def workload_pods(lab: RunningLab) -> dict[str, set[str]]:
    """Pod uids of each chart component (controller, engine, agent)."""
    out: dict[str, set[str]] = {}
    for pod in objects(lab, "pods", NAMESPACE):
        part = pod["metadata"]["labels"].get("app.kubernetes.io/component", "?")
        out.setdefault(part, set()).add(pod["metadata"]["uid"])
    return out


def rolled(lab: RunningLab, annotation: tuple[str, str] | None = None) -> bool:
    """Every Deployment and DaemonSet of the chart done: its pod template current (carrying
    ``annotation`` when given), every replica updated and available, and no other pod."""
    def current(obj: dict[str, Any]) -> bool:
        got = (obj["spec"]["template"]["metadata"].get("annotations") or {})
        return annotation is None or got.get(annotation[0]) == annotation[1]

    for deploy in objects(lab, "deployments", NAMESPACE):
        st, want = status(deploy), deploy["spec"]["replicas"]
        conditions = {c["type"]: c["status"] for c in st.get("conditions") or []}
        if not (current(deploy) and st.get("observedGeneration") == deploy["metadata"]
                ["generation"] and st.get("updatedReplicas") == want == st.get("replicas")
                and st.get("availableReplicas") == want and conditions.get("Available") ==
                "True"):
            return False
    for ds in objects(lab, "daemonsets", NAMESPACE):
        st = status(ds)
        want = st.get("desiredNumberScheduled")
        if not (current(ds) and st.get("observedGeneration") == ds["metadata"]["generation"]
                and want and st.get("updatedNumberScheduled") == want ==
                st.get("numberAvailable")):
            return False
    pods = objects(lab, "pods", NAMESPACE)
    return all(not p["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status(p).get("conditions") or []) for p in pods)


class Load:
    """A steady stream of requests (a new connection each) from the client namespace, with
    every failure's time (seconds after ``began``) and text."""

    def __init__(self, lab: RunningLab, url: str, host: str = "") -> None:
        self.url, self.host, self.stop = parse_url(url), host, threading.Event()
        self.seen: Counter[str] = Counter()
        self.failures: list[str] = []
        self.began = time.monotonic()
        self.pool = single_thread(netns=f"pwlab-{lab.name}-client", name="lab-upgrade-load")
        self.running = self.pool.submit(self._run)

    def _run(self) -> None:
        while not self.stop.is_set():
            reply = request(self.url, host_header=self.host)
            self.seen["ok" if reply.ok else f"{reply.status} {reply.error}"] += 1
            if not reply.ok:
                self.failures.append(f"+{time.monotonic() - self.began:.2f}s {reply.status} "
                                     f"{reply.error} {reply.body[:160]!r}")

    def first_last(self) -> str:
        return f"{self.failures[0]} … {self.failures[-1]}" if self.failures else "none"

    def end(self) -> None:
        self.stop.set()
        try:
            self.running.result()
        finally:
            self.pool.shutdown()


def test_helm_upgrade_rolls_every_workload_without_a_failed_request(
        serving: tuple[RunningLab, str, str]) -> None:
    lab, l4, l7 = serving
    before = workload_pods(lab)
    assert set(before) == {"controller", "engine", "agent"}, before
    mark = ("example.com/upgrade", uuid.uuid4().hex[:8])
    loads = {"l4": Load(lab, l4), "l7": Load(lab, l7, HOST)}
    try:
        time.sleep(2)  # load before the upgrade too
        at = time.monotonic() - loads["l4"].began
        lab.cli("upgrade", "--pod-annotation", "=".join(mark))
        eventually(lambda: rolled(lab, mark), within=600, what="every workload rolled",
                   explain=lambda: explain(lab))
        after = workload_pods(lab)
        assert all(not before[k] & after[k] and len(after[k]) == len(before[k])
                   for k in before), (before, after)
        time.sleep(3)  # and load after it, on the new pods only
    finally:
        for load in loads.values():
            load.end()
    for kind, load in loads.items():
        print(f"\n{kind}: upgrade at +{at:.2f}s, rolled by +{time.monotonic() - load.began:.0f}s:"
              f" {dict(load.seen)}; failures: {len(load.failures)}, {load.first_last()}")
    assert all(load.seen["ok"] > 50 for load in loads.values())
    assert {k: load.failures[:20] for k, load in loads.items()} == {"l4": [], "l7": []}
