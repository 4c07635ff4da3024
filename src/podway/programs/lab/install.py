"""``podway lab up --install``: Podway installed into the lab the way users install it — the
real Helm chart through Helm's own library (helm-sdkpy, ``helm_install``), its pods running from
the image archive under runc, under their ServiceAccounts with RBAC enforced — instead of the
lab's own controller, engine and agents (the daemon does not start those then).

What a cluster admin does first (docs/install.md), done here before ``helm install``:

- the release namespace (``podway``);
- the xDS certificates (docs/install.md, section 3): ``podway-xds-tls`` (the controller's
  serving certificate for ``podway-xds.<ns>.svc`` and its CA), the ConfigMap ``podway-xds-ca``
  (that CA, for the engines, which get their client certificates from the controller by CSR)
  and ``podway-engine-tls`` (a client certificate naming the edge node, for
  ``engineCertificates.source: secret``), signed by the lab's CA;
- the engine node: ``lab-node-1`` labelled ``podway.io/edge=true`` (the chart's default engine
  group selector);
- reachability ``none`` ("you route them yourself"): the VIP pool is routed by the edge router
  to that node, and the node takes it as local (AnyIP), so its engine can bind any VIP;
  or ``l2`` (the chart's L2 mode, MetalLB's): the pool is on-link on the edge router's fabric
  interface, so the router asks ARP for each VIP on the nodes' segment and the chart's
  ``podway vip l2`` DaemonSet answers from the engine node.
- ``net.ipv4.tcp_migrate_req=1`` on that node, for the engine's rolling update (``upgrade``).

Values: the image is ``podway:<archive tag>``, one engine replica (one edge node), the
controller's two replicas with its Lease, the agent DaemonSet on every node.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podway.base.errors import EnvironmentProblem
from podway.programs.lab import network
from podway.programs.lab.api import LabApi
from podway.programs.lab.pki import LabPki, issue
from podway.programs.lab.plan import CLUSTER_DOMAIN, LabPlan
from podway.programs.lab.state import LabState
from podway.translate.annotations import PREFIX

Obj = dict[str, Any]
NAMESPACE = "podway"
EDGE_LABEL = PREFIX + "edge"  # declared in annotations.OTHER_KEYS
VIP_POOL = "198.18.100.0/28"
XDS_SECRET, ENGINE_SECRET, XDS_CA = "podway-xds-tls", "podway-engine-tls", "podway-xds-ca"
ROOT = Path(__file__).resolve().parents[4]
CHART = ROOT / "deploy" / "helm" / "podway"
HELPER = Path(__file__).with_name("helm_install.py")


def helm_python() -> Path:
    """The interpreter with helm-sdkpy: ``PODWAY_HELM_PYTHON``, else the repository's
    ``.venv-helm`` (``./dev`` makes it); an ``EnvironmentProblem`` saying so otherwise."""
    for candidate in (os.environ.get("PODWAY_HELM_PYTHON"), str(ROOT / ".venv-helm/bin/python")):
        if candidate and Path(candidate).exists() and subprocess.run(
                [candidate, "-c", "import helm_sdkpy"], capture_output=True,
                check=False).returncode == 0:
            return Path(candidate)
    raise EnvironmentProblem("--install needs Helm's library: set PODWAY_HELM_PYTHON to a "
                             "Python >= 3.12 with helm-sdkpy (or let ./dev make .venv-helm)")


def values(tag: str, engine: str = "envoy", reachability: str = "none") -> Obj:
    return {
        "image": {"repository": "podway", "tag": tag, "pullPolicy": "Never"},
        "controller": {"replicas": 2, "tlsSecret": XDS_SECRET},
        "engineGroups": [{"name": "edge", "engine": engine, "replicas": 1,
                          "nodeSelector": {EDGE_LABEL: "true"}, "tlsSecret": ENGINE_SECRET,
                          "concurrency": 1, "onlyItsObjects": False,
                          "secondChance": {"pair": [], "ports": [80, 443], "peerUrl": ""}}],
        "vipPools": [{"name": "default", "addresses": [VIP_POOL]}],
        # The group Secret above, not the chart's default (each engine asking the controller
        # for its own certificate, engineCertificates.source csr): the lab install has not
        # been run with that yet.
        "engineCertificates": {"source": "secret"},
        "reachability": {"mode": reachability, "l2": {"interface": "eth0"}}}


def tls_secrets(pki: LabPki, edge_nodes: list[str]) -> list[Obj]:
    """The two Secrets the chart's xDS needs, signed by the lab's CA."""
    ca_cert, ca_key = pki.ca_cert.read_bytes(), pki.ca_key.read_bytes()
    svc = "podway-xds"
    server = issue(ca_cert, ca_key, cn=f"{svc}.{NAMESPACE}.svc", dns=(
        svc, f"{svc}.{NAMESPACE}", f"{svc}.{NAMESPACE}.svc",
        f"{svc}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}"))
    client = issue(ca_cert, ca_key, cn=edge_nodes[0], dns=tuple(edge_nodes), server=False,
                   client=True)

    def secret(name: str, pair: tuple[bytes, bytes]) -> Obj:
        data = {"tls.crt": pair[0], "tls.key": pair[1], "ca.crt": ca_cert}
        return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    # The engines' trust in the controller (engineCertificates.source csr, the default: each
    # engine asks the controller for its own client certificate with a CSR).
    xds_ca = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": XDS_CA, "namespace": NAMESPACE},
              "data": {"ca.crt": ca_cert.decode()}}
    return [secret(XDS_SECRET, server), secret(ENGINE_SECRET, client), xds_ca]


def _call(api: LabApi, method: str, path: str, body: Obj, *, ok: tuple[int, ...],
          content_type: str = "application/json") -> None:
    code, answer = api.call(method, path, body, content_type)
    if code not in ok:
        raise EnvironmentProblem(f"lab install: {method} {path}: {answer.get('message', code)}")


def prepare(api: LabApi, plan: LabPlan, pki: LabPki, reachability: str = "none") -> None:
    """The namespace, the edge node's label, the Secrets and the VIP pool's routes."""
    edge = plan.nodes[0]
    _call(api, "POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}, ok=(201, 409))
    _call(api, "PATCH", f"/api/v1/nodes/{edge.name}",
          {"metadata": {"labels": {EDGE_LABEL: "true"}}}, ok=(200,),
          content_type="application/merge-patch+json")
    for obj in tls_secrets(pki, [edge.name]):
        plural = "secrets" if obj["kind"] == "Secret" else "configmaps"
        _call(api, "POST", f"/api/v1/namespaces/{NAMESPACE}/{plural}", obj, ok=(201, 409))
    # A rolling update's old engine closes its listening sockets once the new one shares
    # them (SO_REUSEPORT): connections still in its accept queue move to the new one instead
    # of being reset (docs/install.md, "Upgrade": set on every engine node).
    network.sh("ip", "netns", "exec", edge.netns, "sysctl", "-qw", "net.ipv4.tcp_migrate_req=1")
    if reachability == "l2":  # the router asks ARP for each VIP on the nodes' segment
        network.sh("ip", "-n", plan.edge, "route", "replace", VIP_POOL, "dev", "eth0")
        return
    network.sh("ip", "-n", plan.edge, "route", "replace", VIP_POOL, "via", edge.ip)
    network.sh("ip", "-n", edge.netns, "route", "replace", "local", VIP_POOL, "dev", "lo")


def helm(action: str, kubeconfig: Path, values_: Obj, *, python: Path,
         chart: Path = CHART) -> str:
    """``helm install|upgrade podway`` of ``chart`` into the lab with ``values_``; the
    release's manifest. The release is a Secret in the lab's API, as Helm keeps it."""
    done = subprocess.run(
        [str(python), str(HELPER), action, str(chart), str(kubeconfig), NAMESPACE,
         json.dumps(values_)], capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "HELM_DRIVER": "secret"})
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["failed"]
        raise EnvironmentProblem(f"lab {action}: {lines[-1]}")
    return done.stdout


def install(state: LabState, plan: LabPlan, tag: str, *, engine: str = "envoy",
            reachability: str = "none", say: Callable[[str], None] = lambda _: None) -> str:
    python = helm_python()
    say("install: namespace, certificates, edge node")
    prepare(LabApi.of(state), plan, state.pki, reachability)
    say("install: helm install podway (deploy/helm/podway)")
    chosen = values(tag, engine, reachability)
    manifest = helm("install", state.kubeconfig, chosen, python=python)
    (state.root / "install.yaml").write_text(manifest)
    (state.root / "install-values.json").write_text(json.dumps(chosen))
    return manifest


def upgrade(state: LabState, *, pod_annotations: dict[str, str],
            chart: Path = CHART) -> str:
    """``helm upgrade podway`` in place: the values of the install (or of the last upgrade)
    with ``podAnnotations`` replaced, which changes every workload's pod template (controller,
    engines, agents), so each rolls by its own update strategy."""
    path = state.root / "install-values.json"
    if not path.exists():
        raise EnvironmentProblem("lab upgrade: this lab was not started with --install")
    chosen = {**json.loads(path.read_text()), "podAnnotations": dict(pod_annotations)}
    manifest = helm("upgrade", state.kubeconfig, chosen, python=helm_python(), chart=chart)
    (state.root / "install.yaml").write_text(manifest)
    path.write_text(json.dumps(chosen))
    return manifest
