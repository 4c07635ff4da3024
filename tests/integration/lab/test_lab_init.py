"""Init containers in the lab's kubelet (issue 29), for a process pod, end to end: they run in
the pod's network namespace in order, each to completion; one that fails is run again (the pod
stays Pending, ``Initialized`` False, ``kubectl get pods`` says ``Init:…``) and the app
container does not start meanwhile; once the last one completes the pod runs and turns Ready.
Under ``restartPolicy: Never`` a failed init container fails the pod."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.lab.conftest import RunningLab

pytestmark = [pytest.mark.netns, pytest.mark.timeout(600)]


def pod_manifest(name: str, folder: Path, *, policy: str = "Always") -> str:
    """Two init containers writing to ``folder/order`` from the pod's network namespace (the
    second one fails until ``folder/go`` exists), then the lab's echo app on port 80."""
    order = folder / "order"
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "lab-node-4", "restartPolicy": policy,
            "initContainers": [
                {"name": "first", "image": "busybox",
                 "command": ["sh", "-c", f"ip -4 -o addr show eth0 >> {order}; echo first "
                             f">> {order}"]},
                {"name": "gate", "image": "busybox",
                 "command": ["sh", "-c", f"test -e {folder / 'go'} && echo gate >> {order}"]}],
            "containers": [{"name": "app", "image": "echo",
                            "ports": [{"containerPort": 80}],
                            "readinessProbe": {"httpGet": {"path": "/", "port": 80},
                                               "periodSeconds": 1}}]}})


def pod_of(lab: RunningLab, name: str) -> dict[str, Any] | None:
    return next((p for p in lab.pods() if p["metadata"]["name"] == name), None)


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in pod["status"]["conditions"] if c["type"] == kind)


def kubectl_status(lab: RunningLab, name: str) -> str | None:
    """The STATUS column ``kubectl get pod`` prints (None without kubectl)."""
    if shutil.which("kubectl") is None:
        return None
    done = subprocess.run(["kubectl", "--kubeconfig", str(lab.state.root / "kubeconfig"),
                           "get", "pod", name, "--no-headers"],
                          capture_output=True, text=True, check=False, timeout=60)
    return done.stdout.split()[2] if done.returncode == 0 and done.stdout.split() else ""


def test_init_containers_run_in_order_and_hold_the_app_back(lab: RunningLab,
                                                             tmp_path: Path) -> None:
    manifest = tmp_path / "pod.json"
    manifest.write_text(pod_manifest("inits", tmp_path))
    lab.cli("apply", "-f", str(manifest))
    try:
        def retried() -> dict[str, Any] | None:
            pod = pod_of(lab, "inits")
            inits = ((pod or {}).get("status") or {}).get("initContainerStatuses") or []
            return pod if len(inits) == 2 and inits[1]["restartCount"] >= 1 else None

        pod = lab.wait(retried, what="the gate init container run again after failing")
        first, gate = pod["status"]["initContainerStatuses"]
        assert first["state"]["terminated"]["reason"] == "Completed"
        assert gate["lastState"]["terminated"]["exitCode"] == 1
        assert pod["status"]["phase"] == "Pending"
        assert condition(pod, "Initialized")["status"] == "False"
        assert condition(pod, "Initialized")["message"] == \
            "containers with incomplete status: [gate]"
        assert condition(pod, "Ready")["status"] == "False"
        assert pod["status"]["containerStatuses"][0]["state"] == {
            "waiting": {"reason": "PodInitializing"}}
        shown = kubectl_status(lab, "inits")
        assert shown is None or shown.startswith("Init:"), shown
        # The first ran once, in the pod's namespace (its address), before anything else.
        lines = (tmp_path / "order").read_text().splitlines()
        assert lines[1:] == ["first"]
        assert pod["status"]["podIP"] + "/" in lines[0]
        (tmp_path / "go").touch()
        lab.wait(lambda: "inits" in lab.ready_pods(), what="the pod Ready after its inits")
        pod = pod_of(lab, "inits")
        assert pod is not None
        assert pod["status"]["phase"] == "Running"
        assert condition(pod, "Initialized")["status"] == "True"
        assert all(s["state"]["terminated"]["exitCode"] == 0
                   for s in pod["status"]["initContainerStatuses"])
        assert (tmp_path / "order").read_text().splitlines()[1:] == ["first", "gate"]
        shown = kubectl_status(lab, "inits")
        assert shown is None or shown == "Running", shown
    finally:
        lab.api.call("DELETE", "/api/v1/namespaces/default/pods/inits")


def test_a_failed_init_container_fails_a_never_restarting_pod(lab: RunningLab,
                                                             tmp_path: Path) -> None:
    manifest = tmp_path / "pod.json"
    manifest.write_text(pod_manifest("once", tmp_path, policy="Never"))
    lab.cli("apply", "-f", str(manifest))
    try:
        pod = lab.wait(lambda: (p := pod_of(lab, "once")) is not None
                       and p.get("status", {}).get("phase") == "Failed" and p,
                       what="the pod Failed")
        gate = pod["status"]["initContainerStatuses"][1]
        assert gate["state"]["terminated"]["exitCode"] == 1
        assert gate["restartCount"] == 0
        assert (tmp_path / "order").read_text().splitlines()[1:] == ["first"]
    finally:
        lab.api.call("DELETE", "/api/v1/namespaces/default/pods/once")
