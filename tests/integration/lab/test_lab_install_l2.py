"""Issue 31 in the lab install: the chart's L2 mode (``reachability.mode: l2``) installed the way
users install it, serving a LoadBalancer Service through a VIP that only ARP makes reachable.

``podway lab up --install --install-reachability l2``: the edge router has the VIP pool on-link
on its fabric interface (no route to a node), so a request from the client reaches the VIP only
if some node answers the router's ARP for it. The chart's ``podway-l2-edge`` DaemonSet runs on
the engine node from Podway's image under runc, as its own ServiceAccount with RBAC enforced
(Nodes, Services and the engine pod read through the ``kubernetes`` Service), with NET_ADMIN and
NET_RAW only. It puts the Service's VIP on the engine node's ``eth0``, the router learns the
node's MAC for it, and the request is answered by a backend pod through the chart's Envoy
engine. The lab's kubelet runs init containers, so the chart's own do the host set-up: the
engine's ``host-setup`` (privileged) sets ``ip_nonlocal_bind`` on the node, so Envoy binds a VIP
the node does not hold yet, and the speaker's ``arp-isolation`` sets ``arp_ignore`` and
``arp_announce``; the test does nothing on the node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podway.base.errors import EnvironmentProblem
from podway.programs.agent.netns import single_thread
from podway.programs.lab import network
from podway.programs.lab.install import NAMESPACE, VIP_POOL, helm_python
from podway.programs.lab.state import LabState
from podway.programs.lab.traffic import parse_url, request
from tests.integration.lab.conftest import RunningLab, eventually, lab_unavailable
from tests.integration.lab.test_lab_install import APP, explain, kubectl, objects, status

pytestmark = [pytest.mark.e2e, pytest.mark.netns, pytest.mark.image,
              pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory,
              podway_image: Path) -> Iterator[RunningLab]:
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    try:
        helm = helm_python()
    except EnvironmentProblem as exc:
        pytest.skip(str(exc))
    name = f"l{uuid.uuid4().hex[:6]}"
    state = LabState(tmp_path_factory.mktemp("lab") / "state")
    lab = RunningLab(name=name, state=state, client=single_thread(netns=None, name="t"))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "podway", "lab", "up", "--nodes", "2", "--install",
             "--install-reachability", "l2", "--image", str(podway_image), "--name", name,
             "--state-dir", str(state.root)],
            capture_output=True, text=True, check=False, timeout=600,
            env={**os.environ, "PODWAY_HELM_PYTHON": str(helm)})
        assert done.returncode == 0, done.stderr[-3000:]
        lab.client.shutdown()
        lab.client = single_thread(netns=f"pwlab-{name}-client", name="lab-install-l2")
        yield lab
    finally:
        lab.client.shutdown()
        lab.cli("down", check=False)


def ip(netns: str, *args: str) -> str:
    return network.sh("ip", "-n", netns, *args)


def test_the_chart_s_l2_mode_answers_arp_for_the_service_s_vip(installed: RunningLab,
                                                               tmp_path: Path) -> None:
    lab = installed
    node, edge = f"pwlab-{lab.name}-node1", f"pwlab-{lab.name}-edge"
    assert f"{VIP_POOL} dev eth0" in ip(edge, "route", "show", VIP_POOL)  # on-link: ARP only
    eventually(lambda: all(status(d).get("availableReplicas") == d["spec"]["replicas"]
                           for d in objects(lab, "deployments", NAMESPACE)),
               within=300, what="the chart's Deployments available", explain=lambda: explain(lab))
    eventually(lambda: {d["metadata"]["name"]: status(d).get("numberReady")
                        for d in objects(lab, "daemonsets", NAMESPACE)}
               == {"podway-agent": 2, "podway-l2-edge": 1},
               within=180, what="the agents and the L2 speaker ready",
               explain=lambda: explain(lab))
    speaker = next(p for p in objects(lab, "pods", NAMESPACE)
                   if p["metadata"]["labels"].get("app.kubernetes.io/component") == "l2")
    assert speaker["spec"]["nodeName"] == "lab-node-1"
    assert speaker["spec"]["serviceAccountName"] == "podway-l2"
    # The chart's init containers ran, in the node's namespace (host networking), before
    # their pods' containers: the engine's host-setup and the speaker's ARP isolation.
    for component, init in (("engine", "host-setup"), ("l2", "arp-isolation")):
        pod = next(p for p in objects(lab, "pods", NAMESPACE) if p["metadata"]["labels"].get(
            "app.kubernetes.io/component") == component and p["spec"]["nodeName"] == "lab-node-1")
        (done,) = [s for s in pod["status"]["initContainerStatuses"] if s["name"] == init]
        assert done["state"]["terminated"]["exitCode"] == 0, done
        assert next(c for c in pod["status"]["conditions"]
                    if c["type"] == "Initialized")["status"] == "True"
    sysctl = f"ip netns exec {node} sysctl -n".split()
    assert network.sh(*sysctl, "net.ipv4.ip_nonlocal_bind").strip() == "1"
    assert network.sh(*sysctl, "net.ipv4.conf.eth0.arp_announce").strip() == "2"
    app = tmp_path / "app.yaml"
    app.write_text(APP)
    kubectl(lab, "apply", "-f", str(app))

    def vip() -> str | None:
        svc = json.loads(kubectl(lab, "get", "service", "web", "-o", "json"))
        ingress = (svc.get("status") or {}).get("loadBalancer", {}).get("ingress") or []
        return str(ingress[0]["ip"]) if ingress else None

    address = eventually(vip, within=120, what="a VIP for the Service",
                         explain=lambda: explain(lab))
    eventually(lambda: f"{address}/32" in ip(node, "-4", "addr", "show", "dev", "eth0"),
               within=60, what="the VIP on the engine node's eth0", explain=lambda: explain(lab))
    pods = {p["metadata"]["name"] for p in objects(lab, "pods", "default")}

    def answer() -> dict[str, Any] | None:
        reply = lab.client.submit(request, parse_url(f"http://{address}/")).result()
        return reply.echo() if reply.ok else None

    echo = eventually(answer, within=120, what="a 200 through the VIP",
                      explain=lambda: explain(lab))
    assert echo["pod"] in pods
    mac = network.sh("ip", "netns", "exec", node, "cat", "/sys/class/net/eth0/address").strip()
    assert mac in ip(edge, "neigh", "show", address)  # the router learnt it by ARP
    # It got there through the API as its own account: a list the API refused would have
    # stopped it before it claimed anything (run_in_cluster), and it still runs.
    again = next(p for p in objects(lab, "pods", NAMESPACE)
                 if p["metadata"]["name"] == speaker["metadata"]["name"])
    assert again["status"]["phase"] == "Running"


def test_down_leaves_nothing(installed: RunningLab) -> None:
    installed.cli("down")
    assert not network.namespaces(f"pwlab-{installed.name}")
    assert not installed.state.root.exists()
