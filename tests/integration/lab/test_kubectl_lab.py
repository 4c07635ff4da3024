"""The lab as a faithful cluster, driven by the real kubectl (issue 29 items 1-3): a scripted
session (get with printer columns, wait, apply with validation, server dry run, namespaces
that must exist, DaemonSets, readiness gates, logs), graceful termination, and the issue's
target, ``kubectl rollout restart`` of the seeds' backend Deployment under L4 and L7 load
through Podway losing no request.

Its own lab (module scope), torn down at the end like test_lab's."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from podway.programs.agent.netns import single_thread
from podway.programs.lab.plan import VIP
from podway.programs.lab.traffic import parse_url, request
from tests.integration.lab.conftest import RunningLab

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(shutil.which("kubectl") is None,
                                 reason="kubectl not installed")]

LB = f"http://{VIP}:8080/"
L7 = f"http://{VIP}:80/"

GATED = """\
apiVersion: v1
kind: Namespace
metadata: {name: gates}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: gated, namespace: gates}
spec:
  replicas: 1
  selector: {matchLabels: {app: gated}}
  template:
    metadata: {labels: {app: gated}}
    spec:
      readinessGates: [{conditionType: example.com/gate}]
      containers:
      - name: echo
        image: echo
        ports: [{containerPort: 80}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: everywhere, namespace: gates}
spec:
  selector: {matchLabels: {app: everywhere}}
  template:
    metadata: {labels: {app: everywhere}}
    spec:
      nodeSelector: {lab.podway.io/seed: "true"}
      containers:
      - name: echo
        image: echo
        ports: [{containerPort: 81}]
"""


@pytest.fixture(scope="module")
def kubectl_env(lab: RunningLab, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("kubectl")  # kubectl's discovery cache goes under it
    return {**os.environ, "KUBECONFIG": str(lab.state.kubeconfig), "HOME": str(home)}


def kubectl(env: dict[str, str], *args: str, ok: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)
    assert (done.returncode == 0) == ok, done
    return done


@contextlib.contextmanager
def steady_load(lab: RunningLab) -> Iterator[dict[str, Counter[str]]]:
    """L4 (a new connection each) and L7 requests on the VIP, back to back from the client
    namespace, while the block runs; what they got, per kind ("ok" or the failure)."""
    stop = threading.Event()
    seen: dict[str, Counter[str]] = {"l4": Counter(), "l7": Counter()}

    def steady(kind: str, url: str, host: str) -> None:
        while not stop.is_set():
            reply = request(parse_url(url), host_header=host)
            seen[kind]["ok" if reply.ok else f"{reply.status} {reply.error}"] += 1

    loads = [single_thread(netns=f"pwlab-{lab.name}-client", name=f"lab-{k}") for k in seen]
    running = [loads[0].submit(steady, "l4", LB, ""),
               loads[1].submit(steady, "l7", L7, "httpd.lab")]
    try:
        yield seen
    finally:
        stop.set()
        for future in running:
            future.result()
        for load in loads:
            load.shutdown()


def assert_none_failed(seen: dict[str, Counter[str]]) -> None:
    assert seen["l4"]["ok"] > 100, seen
    assert seen["l7"]["ok"] > 100, seen
    assert {k: sum(n for what, n in c.items() if what != "ok") for k, c in seen.items()} == \
        {"l4": 0, "l7": 0}, seen


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_kubectl_session(lab: RunningLab, kubectl_env: dict[str, str], tmp_path: Path) -> None:
    env = kubectl_env
    nodes = rows(kubectl(env, "get", "nodes").stdout)
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert sorted(r[1] for r in nodes[1:]) == ["Ready"] * 4
    kubectl(env, "wait", "--for=condition=Available", "deployment/httpd", "--timeout=60s")
    deploys = rows(kubectl(env, "get", "deploy", "httpd").stdout)
    assert deploys[1][:4] == ["httpd", "4/4", "4", "4"]
    # The lab's kubeconfig is the administrator (its token, over HTTPS with the lab's CA).
    assert kubectl(env, "auth", "can-i", "delete", "nodes").stdout.strip() == "yes"
    # RBAC holds for a ServiceAccount's token (what an in-cluster client sends): the default
    # ServiceAccount is bound to nothing, so it may not even list nodes.
    token = kubectl(env, "create", "token", "default").stdout.strip()
    denied = kubectl(env, "--token", token, "get", "nodes", ok=False)
    assert denied.stderr.strip() == (
        'Error from server (Forbidden): nodes is forbidden: User '
        '"system:serviceaccount:default:default" cannot list resource "nodes" in API group "" '
        'at the cluster scope')
    everything = kubectl(env, "get", "all").stdout
    assert "replicaset.apps/httpd-" in everything
    assert "service/lb-httpd" in everything

    manifest = tmp_path / "gated.yaml"
    manifest.write_text(GATED)
    # A server dry run of a namespace and what goes in it: refused (the namespace does not
    # exist yet), and nothing was created, so no pod starts.
    refused = kubectl(env, "apply", "--dry-run=server", "-f", str(manifest), ok=False)
    assert 'namespaces "gates" not found' in refused.stderr
    assert kubectl(env, "get", "namespace", "gates", ok=False).returncode != 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(GATED.replace("replicas: 1", "replicas: 1\n  replica: 2"))
    refused = kubectl(env, "apply", "-f", str(bad), ok=False)
    assert 'unknown field "spec.replica"' in refused.stderr
    kubectl(env, "delete", "namespace", "gates", "--ignore-not-found")
    kubectl(env, "apply", "-f", str(manifest))
    try:
        kubectl(env, "rollout", "status", "-n", "gates", "daemonset/everywhere",
                "--timeout=90s")
        ds = rows(kubectl(env, "get", "ds", "-n", "gates").stdout)
        assert ds[1][:6] == ["everywhere", "3", "3", "3", "3", "3"]
        placed = kubectl(env, "get", "pods", "-n", "gates", "-l", "app=everywhere", "-o",
                         "jsonpath={.items[*].spec.nodeName}").stdout.split()
        assert sorted(placed) == ["lab-node-1", "lab-node-2", "lab-node-3"]

        # The gate holds Ready back although the container is ready ...
        def gated_pod() -> str | None:
            out = kubectl(env, "get", "pods", "-n", "gates", "-l", "app=gated", "-o",
                          "jsonpath={.items[0].metadata.name} "
                          "{.items[0].status.containerStatuses[0].ready}").stdout.split()
            return out[0] if out[1:] == ["true"] else None

        name = lab.wait(gated_pod, what="the gated pod's container ready")
        # kubectl logs: the pod process's output (it says "ready" once every port listens).
        assert "ready" in kubectl(env, "logs", "-n", "gates", f"pod/{name}").stdout.split()
        wide = rows(kubectl(env, "get", "pod", "-n", "gates", name, "-o", "wide").stdout)
        assert wide[1][1] == "1/1"
        assert wide[1][-1] == "0/1"  # READINESS GATES
        kubectl(env, "wait", "-n", "gates", f"pod/{name}", "--for=condition=Ready",
                "--timeout=3s", ok=False)
        # ... until its condition is True; the kubelet keeps that condition from then on.
        kubectl(env, "patch", "-n", "gates", "pod", name, "--subresource=status",
                "--type=strategic", "-p",
                '{"status":{"conditions":[{"type":"example.com/gate","status":"True"}]}}')
        kubectl(env, "wait", "-n", "gates", f"pod/{name}", "--for=condition=Ready",
                "--timeout=30s")
        kubectl(env, "wait", "--for=condition=Available", "-n", "gates", "deployment/gated",
                "--timeout=30s")
        conditions = kubectl(env, "get", "pod", "-n", "gates", name, "-o",
                             "jsonpath={.status.conditions[*].type}").stdout.split()
        assert "example.com/gate" in conditions
    finally:
        kubectl(env, "delete", "-f", str(manifest), "--wait=false")


STOPPER = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: stopper, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: stopper}}}}
  template:
    metadata: {{labels: {{app: stopper}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: echo
        image: echo
        ports: [{{containerPort: 82}}]
        lifecycle:
          preStop:
            exec: {{command: [sh, -c, "touch {marker}; sleep 600"]}}
"""


def test_termination_runs_prestop_and_enforces_the_grace_period(
        lab: RunningLab, kubectl_env: dict[str, str], tmp_path: Path) -> None:
    """``kubectl delete pod`` terminates the pod as a cluster does: the pod is marked
    terminating (not deleted at once), its preStop hook runs (it leaves a file) while the pod
    still exists, a hook that would take 10 minutes is cut at the 2 s grace period (plus the
    kubelet's 2 s), the kubelet deletes the pod, and its ReplicaSet replaces it."""
    env = kubectl_env
    marker = tmp_path / "prestop-ran"
    manifest = tmp_path / "stopper.yaml"
    manifest.write_text(STOPPER.format(marker=marker))
    kubectl(env, "apply", "-f", str(manifest))
    try:
        kubectl(env, "rollout", "status", "deployment/stopper", "--timeout=60s")
        (pod,) = [p for p in lab.pods() if p["metadata"]["name"].startswith("stopper-")]
        kubectl(env, "delete", "pod", pod["metadata"]["name"], "--wait=false")

        def hook_ran_while_terminating() -> bool:
            if not marker.exists():
                return False
            found = [p for p in lab.pods() if p["metadata"]["uid"] == pod["metadata"]["uid"]]
            assert found, "the pod was deleted before its preStop hook ran"
            return bool(found[0]["metadata"].get("deletionTimestamp"))

        lab.wait(hook_ran_while_terminating, what="the preStop hook", within=20)
        lab.wait(lambda: not any(p["metadata"]["uid"] == pod["metadata"]["uid"]
                                 for p in lab.pods()), what="the pod gone", within=30)
        hooks = subprocess.run(["pgrep", "-f", f"touch {marker}"], capture_output=True,
                               text=True, check=False).stdout.split()
        assert hooks == []  # the cut hook left no process behind
        lab.wait(lambda: any(p["metadata"]["name"].startswith("stopper-")
                             and not p["metadata"].get("deletionTimestamp")
                             for p in lab.pods()), what="the replacement pod")
    finally:
        kubectl(env, "delete", "-f", str(manifest), "--wait=false")


def test_rollout_restart_under_load_loses_nothing(lab: RunningLab,
                                                  kubectl_env: dict[str, str]) -> None:
    """``kubectl rollout restart deployment/httpd`` while L4 (a new connection each) and L7
    requests run steadily on the VIP: a rolling update (old and new pods overlap, two
    ReplicaSets), ``kubectl rollout status`` returns, every pod is replaced, 0 failures."""
    env = kubectl_env
    old = {p["metadata"]["name"] for p in lab.pods() if p["metadata"]["name"].startswith(
        "httpd-")}
    assert len(old) == 4
    lab.wait(lambda: set(lab.spread(LB, 16)) == old and set(lab.spread(
        L7, 16, host="httpd.lab")) == old, what="both VIP ports over every pod")
    overlap: Counter[int] = Counter()
    done = threading.Event()

    def watch_overlap() -> None:
        while not done.is_set():
            names = {p["metadata"]["name"] for p in lab.pods()
                     if not p["metadata"].get("deletionTimestamp")}
            overlap[len(names & old) and len(names - old) and 1] += 1
            done.wait(0.2)

    with steady_load(lab) as seen:
        assert "restarted" in kubectl(env, "rollout", "restart", "deployment/httpd").stdout
        watcher = threading.Thread(target=watch_overlap, daemon=True)
        watcher.start()
        try:
            out = kubectl(env, "rollout", "status", "deployment/httpd",
                          "--timeout=180s").stdout
        finally:
            done.set()
            watcher.join()
        assert "successfully rolled out" in out
        new = {p["metadata"]["name"] for p in lab.pods()
               if not p["metadata"].get("deletionTimestamp")}
        assert len(new) == 4
        assert not new & old
        lab.wait(lambda: set(lab.spread(LB, 16)) == new, what="L4 over the new pods")
        lab.wait(lambda: set(lab.spread(L7, 16, host="httpd.lab")) == new,
                 what="L7 over the new pods")
        lab.wait(lambda: not old & {p["metadata"]["name"] for p in lab.pods()},
                 what="the old pods gone")
    sets = rows(kubectl(env, "get", "rs", "-l", "app=httpd").stdout)
    assert len(sets) == 3  # header, the old ReplicaSet at 0, the new one at 4
    assert sorted(r[1] for r in sets[1:]) == ["0", "4"]
    assert overlap[1] > 0, overlap  # old and new pods served side by side: a rolling update
    print(f"\nrollout restart: {seen}")
    assert_none_failed(seen)


def test_lb_ready_gate_holds_pods_until_the_engine_reports_them_healthy(
        lab: RunningLab, kubectl_env: dict[str, str]) -> None:
    """The seeds' Deployment gated on ``podway.io/lb-ready``: a rolling update in which every
    new pod becomes Ready only once Podway's controller sets the gate from the engine's health
    reports, under L4 and L7 load with 0 failures; the kubelet keeps the controller's condition
    (it does not flap: its transition time stays put once True)."""
    env = kubectl_env
    gate = "podway.io/lb-ready"
    with steady_load(lab) as seen:
        kubectl(env, "patch", "deployment", "httpd", "-p", json.dumps(
            {"spec": {"template": {"spec": {"readinessGates": [{"conditionType": gate}]}}}}))
        kubectl(env, "rollout", "status", "deployment/httpd", "--timeout=180s")
        lab.wait(lambda: not any(p["metadata"].get("deletionTimestamp") for p in lab.pods()),
                 what="the old pods gone")
    pods = [p for p in lab.pods() if p["metadata"]["name"].startswith("httpd-")]
    assert len(pods) == 4
    for pod in pods:
        assert pod["spec"]["readinessGates"] == [{"conditionType": gate}]
        conditions = {c["type"]: c for c in pod["status"]["conditions"]}
        assert conditions[gate]["status"] == "True", conditions
        assert conditions["Ready"]["status"] == "True", conditions
        # Ready came no earlier than the gate: the gate held it back.
        assert conditions["Ready"]["lastTransitionTime"] >= \
            conditions[gate]["lastTransitionTime"]
    before = {p["metadata"]["name"]: next(c for c in p["status"]["conditions"]
                                          if c["type"] == gate) for p in pods}
    time.sleep(3)
    after = {p["metadata"]["name"]: next(c for c in p["status"]["conditions"]
                                         if c["type"] == gate) for p in lab.pods()
             if p["metadata"]["name"] in before}
    assert after == before  # nobody drops or rewrites the controller's condition
    # Back to the seeds' template: kubectl rollout undo (the Deployment's revision annotation
    # and the ReplicaSets' revisions are what it reads).
    history = kubectl(env, "rollout", "history", "deployment/httpd").stdout
    assert len(rows(history)) >= 4, history  # a title, a header and the revisions
    kubectl(env, "rollout", "undo", "deployment/httpd")
    kubectl(env, "rollout", "status", "deployment/httpd", "--timeout=180s")
    template = kubectl(env, "get", "deployment", "httpd", "-o",
                       "jsonpath={.spec.template.spec.readinessGates}").stdout
    assert template == ""
    print(f"\nlb-ready rollout: {seen}")
    assert_none_failed(seen)


def test_lab_kubectl_as_a_service_account_is_held_to_rbac(lab: RunningLab) -> None:
    """Issue 29.2: the lab's kubectl is the administrator; ``podway lab kubectl --as NS/NAME``
    acts as that ServiceAccount and the lab's API answers with RBAC's 403."""
    def lab_kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "podway", "lab", "kubectl", "--name",
                               lab.name, "--state-dir", str(lab.state.root), *args],
                              capture_output=True, text=True, check=False, timeout=60)

    admin = lab_kubectl("--", "get", "secrets", "-n", "default")
    assert admin.returncode == 0, admin.stderr
    denied = lab_kubectl("--as", "default/nobody", "--", "get", "secrets", "-n", "default")
    assert denied.returncode == 1
    assert 'User "system:serviceaccount:default:nobody" cannot list resource "secrets"' in \
        denied.stderr
    assert lab_kubectl("--as", "default/nobody", "--", "auth", "can-i", "get",
                       "pods").stdout.strip() == "no"


def test_down_leaves_nothing(lab: RunningLab) -> None:
    lab.cli("down")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=True).stdout
    assert f"pwlab-{lab.name}-" not in netns

