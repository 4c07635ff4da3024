"""Pods from Podway's image run as real containers in the lab (``lab up --image``): the
kubelet unpacks the archive with umoci and runs each container under runc in the pod's network
namespace, with the pod's env (fieldRef, Secret keys), args, volumes (a Secret as files, a
hostPath), securityContext (runAsUser, readOnlyRootFilesystem, capabilities) and readiness
probe; the echo server it serves is reachable from the client. Pods of other images keep
running as before (the rest of tests/integration/lab)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from podway.programs.agent.netns import single_thread
from podway.programs.lab import network
from podway.programs.lab.container import mounted_under
from podway.programs.lab.state import LabState
from tests.integration.lab.conftest import RunningLab, lab_unavailable

pytestmark = [pytest.mark.netns, pytest.mark.image, pytest.mark.timeout(1800)]

APP = """
apiVersion: v1
kind: Secret
metadata: {name: greeting, namespace: default}
stringData: {word: bonjour}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: imgecho, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: imgecho}}
  template:
    metadata: {labels: {app: imgecho}}
    spec:
      terminationGracePeriodSeconds: 2
      securityContext: {runAsNonRoot: true}
      containers:
      - name: main
        image: podway:0.1.0
        args: [echo, --address, 0.0.0.0, --port, "8080"]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
        securityContext:
          readOnlyRootFilesystem: true
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: imgcheck, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: imgcheck}}
  template:
    metadata: {labels: {app: imgcheck}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: registry.example:5000/team/podway:0.1.0
        command: [sh, -c]
        args:
        - |
          echo "word=$(cat /etc/greeting/word) env=$WORD host=$(cat /host/marker)"
          echo "uid=$(id -u) gid=$(id -g) version=$(podway version)"
          touch /var/lib/podway/x 2>/dev/null && echo "root=writable" || echo "root=read-only"
          grep -E '^Cap(Bnd|Eff)' /proc/self/status
          echo done
          exec sleep 3600
        env:
        - {name: WORD, valueFrom: {secretKeyRef: {name: greeting, key: word}}}
        volumeMounts:
        - {name: greeting, mountPath: /etc/greeting}
        - {name: host, mountPath: /host, readOnly: true}
        securityContext:
          runAsUser: 10001
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL], add: [NET_ADMIN]}
      - name: writer
        image: podway:0.1.0
        command: [sh, -c, 'touch /var/lib/podway/x && echo "root=writable"; exec sleep 3600']
      volumes:
      - {name: greeting, secret: {secretName: greeting, defaultMode: 292}}
      - {name: host, hostPath: {path: HOSTDIR, type: Directory}}
"""

LATE = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: imglate, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: imglate}}
  template:
    metadata: {labels: {app: imglate}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: podway:0.1.0
        command: [sleep, "3600"]
        env:
        - {name: LATE, valueFrom: {secretKeyRef: {name: late, key: k}}}
"""
LATE_SECRET = """
apiVersion: v1
kind: Secret
metadata: {name: late, namespace: default}
stringData: {k: v}
"""


@pytest.fixture(scope="module")
def image_lab(tmp_path_factory: pytest.TempPathFactory,
              podway_image: Path) -> Iterator[RunningLab]:
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    name = f"i{uuid.uuid4().hex[:6]}"
    state = LabState(tmp_path_factory.mktemp("lab") / "state")
    running = RunningLab(name=name, state=state, client=ThreadPoolExecutor(1))
    try:
        running.cli("up", "--nodes", "1", "--image", str(podway_image))
        running.client = single_thread(netns=f"pwlab-{name}-client", name="lab-test")
        yield running
    finally:
        running.client.shutdown()
        running.cli("down", check=False)
        assert not state.root.exists()
        assert mounted_under(state.root) == []


def pod_named(lab: RunningLab, prefix: str) -> dict[str, Any] | None:
    return next((p for p in lab.pods() if p["metadata"]["name"].startswith(prefix)), None)


def test_a_pod_of_the_image_runs_as_a_container_with_its_spec(image_lab: RunningLab,
                                                              tmp_path: Path) -> None:
    lab = image_lab
    hostdir = tmp_path / "host"
    hostdir.mkdir()
    (hostdir / "marker").write_text("from-the-host")
    manifest = tmp_path / "app.yaml"
    manifest.write_text(APP.replace("HOSTDIR", str(hostdir)))
    lab.cli("apply", "-f", str(manifest))

    # The echo server: Ready through its httpGet probe, answering from the client namespace
    # with the identity its env got from fieldRefs.
    pod = lab.wait(lambda: (p := pod_named(lab, "imgecho-")) and
                   p["metadata"]["name"] in lab.ready_pods() and p,
                   what="the image's echo pod ready", within=180)
    ip = pod["status"]["podIP"]
    reply = lab.ask(f"http://{ip}:8080/")
    assert reply.ok, reply
    echo = reply.echo()
    assert echo["pod"] == pod["metadata"]["name"]
    assert echo["namespace"] == "default"
    assert echo["node"] == "lab-node-1"
    # It is a container: every process in the pods' namespaces runs as the image's user.
    pids = [pid for ns in network.namespaces(f"pwlab-{lab.name}") if "-n1-p" in ns
            for pid in network.pids_in(ns)]
    assert pids
    assert {Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0]
            for pid in pids} == {"10001"}

    # The checker: Secret as files and as env, hostPath, user, read-only root, capabilities.
    check = lab.wait(lambda: pod_named(lab, "imgcheck-"), what="the checker pod")
    log = lab.state.logs / f"pod-default-{check['metadata']['name']}-main.log"
    text = lab.wait(lambda: log.exists() and "done" in log.read_text() and log.read_text(),
                    what="the checker's output", within=120)
    assert "word=bonjour env=bonjour host=from-the-host" in text
    assert "uid=10001 gid=10001 version=0.1.0" in text
    assert "root=read-only" in text
    caps = dict(line.split(":\t") for line in text.splitlines() if line.startswith("Cap"))
    assert caps["CapBnd"] == f"{1 << 12:016x}"  # CAP_NET_ADMIN only, in the bounding set
    assert caps["CapEff"] == "0" * 16  # a non-root process, as on Kubernetes
    writer = lab.state.logs / f"pod-default-{check['metadata']['name']}-writer.log"
    lab.wait(lambda: writer.exists() and "root=writable" in writer.read_text(),
             what="the second container writing to its own root")
    assert mounted_under(lab.state.containers)  # its overlay
    secret_file = lab.state.containers / check["metadata"]["uid"] / "volumes/greeting/word"
    assert oct(secret_file.stat().st_mode & 0o777) == "0o444"

    # A pod whose Secret does not exist yet waits, saying why, and starts once it does.
    late = tmp_path / "late.yaml"
    late.write_text(LATE)
    (tmp_path / "late-secret.yaml").write_text(LATE_SECRET)
    lab.cli("apply", "-f", str(late))

    def waiting() -> str:
        pod = pod_named(lab, "imglate-")
        state = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
        return str(state[0].get("state", {}).get("waiting", {}).get("message", ""))

    assert "secret 'late' not found" in lab.wait(waiting, what="the late pod waiting")
    lab.cli("apply", "-f", str(late).replace("late.yaml", "late-secret.yaml"))
    lab.wait(lambda: (p := pod_named(lab, "imglate-")) and p["metadata"]["name"]
             in lab.ready_pods(), what="the late pod running once its Secret exists")

    # Deleting the Deployments stops the containers and releases their files.
    for name in ("imgecho", "imgcheck", "imglate"):
        lab.api.call("DELETE", lab.api.kind("deployments").path("default", name))
    lab.wait(lambda: not any(pod_named(lab, f"{n}-") for n in ("imgecho", "imgcheck", "imglate")),
             what="the pods gone")
    lab.wait(lambda: {p.name for p in lab.state.containers.iterdir()} <= {"runc"},
             what="the pods' folders gone", within=30)
    assert mounted_under(lab.state.containers) == []
    assert json.loads(subprocess.run(
        ["runc", "--root", str(lab.state.containers / "runc"), "list", "--format", "json"],
        capture_output=True, text=True, check=False).stdout or "null") in (None, [])


PROBED = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: imgprobe, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: imgprobe}}
  template:
    metadata: {labels: {app: imgprobe}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: main
        image: podway:0.1.0
        # /tmp/ready exists only in the container's own root, after 6 s.
        command: [sh, -c, 'sleep 6; touch /tmp/ready; exec sleep 3600']
        readinessProbe:
          exec: {command: [test, -f, /tmp/ready]}
          periodSeconds: 1
        lifecycle:
          preStop:
            exec: {command: [sh, -c, 'echo "uid=$(id -u) ready=$(ls /tmp)" > /host/prestop']}
        securityContext: {runAsUser: 10001}
        volumeMounts:
        - {name: host, mountPath: /host}
      volumes:
      - {name: host, hostPath: {path: HOSTDIR, type: Directory}}
"""


def test_exec_probes_and_hooks_run_in_the_container(image_lab: RunningLab,
                                                    tmp_path: Path) -> None:
    """An ``exec`` readiness probe runs in the container (its root, its user): the pod is not
    Ready until the file the container makes exists (the lab used to count every exec probe as
    passing); an ``exec`` preStop hook runs there too, as the container's user."""
    lab = image_lab
    hostdir = tmp_path / "host"
    hostdir.mkdir(mode=0o777)
    hostdir.chmod(0o777)
    manifest = tmp_path / "probed.yaml"
    manifest.write_text(PROBED.replace("HOSTDIR", str(hostdir)))
    lab.cli("apply", "-f", str(manifest))
    pod = lab.wait(lambda: (p := pod_named(lab, "imgprobe-")) and
                   (p.get("status") or {}).get("containerStatuses") and
                   p["status"]["containerStatuses"][0].get("started") and p,
                   what="the probed container started", within=120)
    name = pod["metadata"]["name"]
    started = time.monotonic()
    while time.monotonic() - started < 3:  # the file is made 6 s after the start
        assert name not in lab.ready_pods()
        time.sleep(0.2)
    lab.wait(lambda: name in lab.ready_pods(), what="ready once /tmp/ready exists", within=60)
    subprocess.run(["kubectl", "--kubeconfig", str(lab.state.kubeconfig), "delete",
                    "deployment", "imgprobe", "--wait=false"], check=True, timeout=60,
                   capture_output=True)
    lab.wait(lambda: pod_named(lab, "imgprobe-") is None, what="the pod gone", within=60)
    assert (hostdir / "prestop").read_text().strip() == "uid=10001 ready=ready"


STOPPING = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: imgstop, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: imgstop}}
  template:
    metadata: {labels: {app: imgstop}}
    spec:
      terminationGracePeriodSeconds: 15
      containers:
      - name: main
        image: podway:0.1.0
        # Told to stop, it takes 4 s to finish (as an engine draining its connections).
        command: [sh, -c, 'trap "echo term > /host/term; sleep 4; echo done > /host/done;
          exit 0" TERM; echo up > /host/up; while true; do sleep 0.2; done']
        securityContext: {runAsUser: 10001}
        volumeMounts:
        - {name: host, mountPath: /host}
      volumes:
      - {name: host, hostPath: {path: HOSTDIR, type: Directory}}
"""


def test_a_container_told_to_stop_gets_its_grace_period(image_lab: RunningLab,
                                                        tmp_path: Path) -> None:
    """A deleted pod's container gets SIGTERM and the pod's grace period to finish, as the
    kubelet gives it: one that takes 4 s after SIGTERM (an engine draining) ends on its own.
    The lab used to stop an image pod's containers with 2 s before SIGKILL whatever the pod
    said, so an engine's Envoy was killed mid-drain in a rolling update."""
    lab = image_lab
    hostdir = tmp_path / "host"
    hostdir.mkdir(mode=0o777)
    hostdir.chmod(0o777)
    manifest = tmp_path / "stopping.yaml"
    manifest.write_text(STOPPING.replace("HOSTDIR", str(hostdir)))
    lab.cli("apply", "-f", str(manifest))
    lab.wait((hostdir / "up").exists, what="the container started", within=120)
    subprocess.run(["kubectl", "--kubeconfig", str(lab.state.kubeconfig), "delete",
                    "deployment", "imgstop", "--wait=false"], check=True, timeout=60,
                   capture_output=True)
    lab.wait(lambda: pod_named(lab, "imgstop-") is None, what="the pod gone", within=60)
    assert (hostdir / "term").read_text().strip() == "term"
    assert (hostdir / "done").read_text().strip() == "done"  # not killed 2 s after SIGTERM
