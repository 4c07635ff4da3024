"""A scripted kubectl session against the emulator as a real API server behaves (issue 29.1):
``kubectl apply`` validating through ``/openapi/v3`` (no ``--validate=false``), unknown fields
refused, server-side dry run storing nothing, namespaces that must exist, the default strategic
merge ``kubectl patch`` and ``kubectl rollout restart`` on a Deployment, RBAC and PDB kinds
stored, Table output with the usual columns, ``kubectl get all``."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from podway.kube.emulator import KubeEmulator

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")

INSTALL = """\
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: podway-echo
        ports: [{containerPort: 80, name: http}]
        env: [{name: A, value: "1"}]
      - name: side
        image: podway-echo
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: http, nodePort: 30080}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: podway, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: podway}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: podway}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: podway}
subjects: [{kind: ServiceAccount, name: podway, namespace: shop}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
"""


class Kubectl:
    def __init__(self, emu: KubeEmulator, cache: Path) -> None:
        self.emu, self.cache = emu, cache

    async def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        trust: tuple[str, ...] = ()
        if self.emu.ca_pem:
            ca = self.cache.parent / "ca.crt"
            ca.write_bytes(self.emu.ca_pem)
            trust = ("--certificate-authority", str(ca))
            if "--token" not in args:
                trust += ("--token", self.emu.admin_token)
        done = await asyncio.to_thread(
            subprocess.run, ["kubectl", "--server", self.emu.url, *trust, "--cache-dir",
                             str(self.cache), *args], capture_output=True, text=True,
            timeout=60, check=False)
        assert (done.returncode == 0) == ok, done
        return done

    async def out(self, *args: str) -> str:
        return (await self.run(*args)).stdout


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[Kubectl]:
    async with KubeEmulator(require_namespaces=True) as emu:
        yield Kubectl(emu, tmp_path / "cache")


def header(text: str) -> list[str]:
    return text.splitlines()[0].split()


def rows_of(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


async def test_apply_validates_through_openapi_and_stores_install_kinds(
        kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "install.yaml"
    manifest.write_text(INSTALL)
    out = await kubectl.out("apply", "-f", str(manifest))
    for what in ("namespace/shop", "deployment.apps/web", "service/web",
                 "serviceaccount/podway", "clusterrole.rbac.authorization.k8s.io/podway",
                 "clusterrolebinding.rbac.authorization.k8s.io/podway",
                 "poddisruptionbudget.policy/web"):
        assert f"{what} created" in out
    assert "unchanged" in await kubectl.out("apply", "-f", str(manifest))
    binding = kubectl.emu.get("clusterrolebindings", "", "podway")
    assert binding is not None
    assert binding["subjects"][0]["name"] == "podway"
    # kubectl left validation to the server: it asked for the OpenAPI v3 document and sent
    # fieldValidation=Strict with its writes.
    assert any(r.startswith("GET /openapi/v3/apis/apps/v1") for r in kubectl.emu.requests)
    assert any("fieldValidation=Strict" in r for r in kubectl.emu.requests)

    bad = tmp_path / "bad.yaml"
    bad.write_text(INSTALL.replace("replicas: 2", "replicas: 2\n  replica: 3")
                   .replace("image: podway-echo\n        ports",
                            "image: podway-echo\n        imagePolicy: x\n        ports"))
    refused = await kubectl.run("apply", "-f", str(bad), ok=False)
    assert "strict decoding error: unknown field" in refused.stderr
    assert 'unknown field "spec.replica"' in refused.stderr
    assert 'unknown field "spec.template.spec.containers[0].imagePolicy"' in refused.stderr
    stored = kubectl.emu.get("deployments", "shop", "web", group="apps")
    assert stored is not None
    assert "replica" not in stored["spec"]


async def test_server_dry_run_stores_nothing_and_namespaces_must_exist(
        kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "install.yaml"
    manifest.write_text(INSTALL)
    before = kubectl.emu.version
    # The namespace is created in the same dry run, so the objects in it are refused: as on
    # a cluster, nothing is stored.
    refused = await kubectl.run("apply", "--dry-run=server", "-f", str(manifest), ok=False)
    assert 'namespaces "shop" not found' in refused.stderr
    assert "namespace/shop created (server dry run)" in refused.stdout
    assert kubectl.emu.version == before
    assert kubectl.emu.get("namespaces", "", "shop") is None
    await kubectl.run("apply", "-f", str(manifest))
    after = kubectl.emu.version
    changed = manifest.read_text().replace("image: podway-echo\n        ports",
                                           "image: podway-echo:2\n        ports")
    manifest.write_text(changed)
    out = await kubectl.out("apply", "--dry-run=server", "-f", str(manifest))
    assert "deployment.apps/web configured (server dry run)" in out
    assert kubectl.emu.version == after, [r for r in kubectl.emu.requests if "dryRun" in r]
    await kubectl.run("delete", "--dry-run=server", "-n", "shop", "deployment", "web")
    await kubectl.run("create", "--dry-run=server", "namespace", "other")
    assert kubectl.emu.version == after
    stored = kubectl.emu.get("deployments", "shop", "web", group="apps")
    assert stored is not None
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "podway-echo"
    assert kubectl.emu.get("namespaces", "", "other") is None

    lost = tmp_path / "lost.yaml"
    lost.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: gone}\n")
    refused = await kubectl.run("apply", "-f", str(lost), ok=False)
    assert 'Error from server (NotFound): error when creating' in refused.stderr
    assert 'namespaces "gone" not found' in refused.stderr


async def test_strategic_patch_and_rollout_restart_of_a_deployment(
        kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "install.yaml"
    manifest.write_text(INSTALL)
    await kubectl.run("apply", "-f", str(manifest))
    # The default patch type is strategic: containers merge by name, env by name.
    await kubectl.run("patch", "-n", "shop", "deployment", "web", "-p",
                      '{"spec":{"template":{"spec":{"containers":[{"name":"web","env":'
                      '[{"name":"B","value":"2"}]}]}}}}')
    deploy = kubectl.emu.get("deployments", "shop", "web", group="apps")
    assert deploy is not None
    containers = deploy["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["web", "side"]
    assert containers[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert containers[0]["ports"] == [{"containerPort": 80, "name": "http"}]
    generation = deploy["metadata"]["generation"]
    assert "deployment.apps/web restarted" in await kubectl.out(
        "rollout", "restart", "-n", "shop", "deployment/web")
    deploy = kubectl.emu.get("deployments", "shop", "web", group="apps")
    assert deploy is not None
    assert "kubectl.kubernetes.io/restartedAt" in \
        deploy["spec"]["template"]["metadata"]["annotations"]
    assert deploy["metadata"]["generation"] == generation + 1
    # A malformed body is the client's error (400), not the server's (kubectl checks its own).
    async with aiohttp.ClientSession() as http, http.patch(
            f"{kubectl.emu.url}/apis/apps/v1/namespaces/shop/deployments/web", data=b'{"spec":',
            headers={"Content-Type": "application/strategic-merge-patch+json"}) as answer:
        assert answer.status == 400
        assert (await answer.json())["reason"] == "BadRequest"
    # $patch: delete removes one container by its merge key.
    await kubectl.run("patch", "-n", "shop", "deployment", "web", "-p",
                      '{"spec":{"template":{"spec":{"containers":'
                      '[{"name":"side","$patch":"delete"}]}}}}')
    deploy = kubectl.emu.get("deployments", "shop", "web", group="apps")
    assert deploy is not None
    assert [c["name"] for c in deploy["spec"]["template"]["spec"]["containers"]] == ["web"]


async def test_get_prints_the_usual_columns_and_get_all(kubectl: Kubectl,
                                                        tmp_path: Path) -> None:
    manifest = tmp_path / "install.yaml"
    manifest.write_text(INSTALL)
    await kubectl.run("apply", "-f", str(manifest))
    emu = kubectl.emu
    emu.put("pods", {"metadata": {"name": "web-1", "namespace": "shop",
                                  "labels": {"app": "web"}},
                     "spec": {"nodeName": "n1", "containers": [{"name": "web"}],
                              "readinessGates": [{"conditionType": "podway.io/lb-ready"}]},
                     "status": {"phase": "Running", "podIP": "198.18.0.5",
                                "conditions": [{"type": "podway.io/lb-ready",
                                                "status": "False"}],
                                "containerStatuses": [{"name": "web", "ready": True,
                                                       "restartCount": 2}]}})
    emu.put("nodes", {"metadata": {"name": "n1",
                                   "labels": {"node-role.kubernetes.io/worker": ""}},
                      "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    pods = await kubectl.out("get", "pods", "-n", "shop", "-o", "wide")
    assert header(pods) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE",
                            "NOMINATED", "NODE", "READINESS", "GATES"]
    assert pods.splitlines()[1].split()[:4] == ["web-1", "1/1", "Running", "2"]
    assert pods.splitlines()[1].split()[-1] == "0/1"
    deploys = await kubectl.out("get", "deploy", "-n", "shop")
    assert header(deploys) == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert deploys.splitlines()[1].split()[:2] == ["web", "0/2"]
    services = await kubectl.out("get", "svc", "-n", "shop")
    assert header(services) == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert services.splitlines()[1].split()[4] == "80:30080/TCP"
    nodes = await kubectl.out("get", "nodes")
    assert nodes.splitlines()[1].split()[:3] == ["n1", "Ready", "worker"]
    emu.put("events", {"metadata": {"name": "web.1", "namespace": "shop"}, "type": "Warning",
                       "reason": "NoVIP", "message": "no address left",
                       "involvedObject": {"kind": "Service", "name": "web"}})
    events = await kubectl.out("get", "events", "-n", "shop")
    assert header(events) == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert events.splitlines()[1].split()[1:] == ["Warning", "NoVIP", "service/web", "no",
                                                  "address", "left"]
    emu.put("ingresses", {"metadata": {"name": "web", "namespace": "shop"},
                          "spec": {"ingressClassName": "podway",
                                   "rules": [{"host": "a.example"}, {"host": "b.example"}]},
                          "status": {"loadBalancer": {"ingress": [{"ip": "198.19.1.1"}]}}})
    ingresses = await kubectl.out("get", "ingress", "-n", "shop")
    assert rows_of(ingresses) == [["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"],
                                  ["web", "podway", "a.example,b.example", "198.19.1.1", "80",
                                   ingresses.split()[-1]]]
    everything = await kubectl.out("get", "all", "-n", "shop")
    assert "pod/web-1" in everything
    assert "service/web" in everything
    assert "deployment.apps/web" in everything
    assert "clusterrole" not in everything
    assert "podway" in await kubectl.out("get", "sa,clusterrolebinding", "-A")


async def test_crd_printer_columns(kubectl: Kubectl) -> None:
    emu = kubectl.emu
    crd = {"metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {
                                      "type": "object",
                                      "properties": {
                                          "spec": {"type": "object", "properties": {
                                              "size": {"type": "integer"}}},
                                          "status": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields":
                                                         True}}}},
                                  "additionalPrinterColumns": [
                                      {"name": "Size", "type": "integer",
                                       "jsonPath": ".spec.size"},
                                      {"name": "Ready", "type": "string",
                                       "jsonPath": '.status.conditions[?(@.type=="Ready")]'
                                                   ".status"}]}]}}
    emu.put("customresourcedefinitions", crd)
    emu.put("widgets", {"metadata": {"name": "w", "namespace": "default"},
                        "spec": {"size": 7},
                        "status": {"conditions": [{"type": "Other", "status": "False"},
                                                  {"type": "Ready", "status": "True"}]}})
    out = await kubectl.out("get", "widgets")
    assert [line.split() for line in out.splitlines()] == [["NAME", "SIZE", "READY"],
                                                           ["w", "7", "True"]]
    # kubectl patch asks for no field validation: the server's default (Warn) answers.
    warned = await kubectl.run("patch", "widget", "w", "--type=merge", "-p",
                               '{"spec":{"colour":"red"}}')
    assert warned.stderr.splitlines() == ['Warning: unknown field "spec.colour"']


NARROW = """\
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [pods/log], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}
subjects: [{kind: ServiceAccount, name: reader, namespace: shop}]
"""


async def test_rbac_is_enforced_for_service_account_tokens(tmp_path: Path) -> None:
    """A token of a ServiceAccount bound to a narrow role: what the role allows works, the
    rest is the cluster's 403, ``auth can-i``/``whoami`` answer for it; ``kubectl logs``
    reads the pod's output. Without credentials (the lab's kubeconfig) all is allowed."""
    async with KubeEmulator(require_namespaces=True, tls=True) as emu:
        await rbac_session(Kubectl(emu, tmp_path / "cache"), tmp_path)


async def rbac_session(kubectl: Kubectl, tmp_path: Path) -> None:
    emu = kubectl.emu
    manifest = tmp_path / "install.yaml"
    manifest.write_text(INSTALL)
    narrow = tmp_path / "narrow.yaml"
    narrow.write_text(NARROW)
    await kubectl.run("apply", "-f", str(manifest), "-f", str(narrow))
    emu.put("pods", {"metadata": {"name": "web-1", "namespace": "shop"},
                     "spec": {"containers": [{"name": "web"}]}})
    emu.set_pod_logs(lambda ns, pod, container: f"{ns}/{pod} line 1\n{ns}/{pod} line 2\n")
    token = (await kubectl.out("create", "token", "-n", "shop", "reader")).strip()
    assert token
    as_reader = ("--token", token)
    assert "web-1" in await kubectl.out(*as_reader, "get", "pods", "-n", "shop")
    assert await kubectl.out(*as_reader, "logs", "-n", "shop", "web-1") == \
        "shop/web-1 line 1\nshop/web-1 line 2\n"
    assert await kubectl.out(*as_reader, "logs", "-n", "shop", "web-1", "--tail=1") == \
        "shop/web-1 line 2\n"
    denied = await kubectl.run(*as_reader, "get", "pods", "-n", "default", ok=False)
    assert denied.stderr.strip() == (
        'Error from server (Forbidden): pods is forbidden: User '
        '"system:serviceaccount:shop:reader" cannot list resource "pods" in API group "" in '
        'the namespace "default"')
    denied = await kubectl.run(*as_reader, "delete", "pod", "-n", "shop", "web-1", ok=False)
    assert 'pods "web-1" is forbidden: User "system:serviceaccount:shop:reader" cannot ' \
           'delete resource "pods" in API group "" in the namespace "shop"' in denied.stderr
    denied = await kubectl.run(*as_reader, "get", "nodes", ok=False)
    assert 'cannot list resource "nodes" in API group "" at the cluster scope' in denied.stderr
    assert emu.get("pods", "shop", "web-1") is not None
    can = await kubectl.run(*as_reader, "auth", "can-i", "list", "pods", "-n", "shop")
    assert can.stdout.strip() == "yes"
    cannot = await kubectl.run(*as_reader, "auth", "can-i", "create", "deployments",
                               "-n", "shop", ok=False)
    assert cannot.stdout.strip() == "no"
    who = await kubectl.out(*as_reader, "auth", "whoami")
    assert "system:serviceaccount:shop:reader" in who
    bad = await kubectl.run("--token", "forged", "get", "pods", ok=False)
    assert "Unauthorized" in bad.stderr
    assert (await kubectl.out("auth", "can-i", "delete", "nodes")).strip() == "yes"


async def test_deleting_a_running_pod_marks_it_terminating(tmp_path: Path) -> None:
    """With graceful pod deletion (the lab): a scheduled pod is marked terminating with its
    grace period for its kubelet to stop; ``--grace-period=0 --force`` and unscheduled pods go
    at once."""
    async with KubeEmulator(graceful_pod_deletion=True) as emu:
        cli = Kubectl(emu, tmp_path / "cache")
        for name, node in (("running", "n1"), ("pending", "")):
            emu.put("pods", {"metadata": {"name": name, "namespace": "default"},
                             "spec": {"nodeName": node, "terminationGracePeriodSeconds": 7,
                                      "containers": [{"name": "c"}]}})
        await cli.run("delete", "pod", "running", "--wait=false")
        leaving = emu.get("pods", "default", "running")
        assert leaving is not None
        assert leaving["metadata"]["deletionGracePeriodSeconds"] == 7
        assert leaving["metadata"]["deletionTimestamp"]
        assert "Terminating" in await cli.out("get", "pod", "running")
        await cli.run("delete", "pod", "pending", "--wait=false")
        assert emu.get("pods", "default", "pending") is None
        await cli.run("delete", "pod", "running", "--grace-period=0", "--force")
        assert emu.get("pods", "default", "running") is None


async def test_the_install_manifests_apply_with_validation(kubectl: Kubectl) -> None:
    """docs/install.md's plain-manifest path, as on a cluster: the namespace, the CRDs, then
    deploy/kubernetes/podway.yaml — every object accepted by kubectl's validation (issue 29:
    ServiceAccounts, RBAC, PDBs and the admission policy were unknown kinds)."""
    root = Path(__file__).resolve().parents[3]
    kubectl.emu.install_gateway_api()
    refused = await kubectl.run("apply", "-f", str(root / "deploy/kubernetes/podway.yaml"),
                                ok=False)
    assert 'namespaces "podway-system" not found' in refused.stderr
    await kubectl.run("create", "namespace", "podway-system")
    await kubectl.run("apply", "-f", str(root / "deploy/helm/podway/crds/"))
    out = await kubectl.out("apply", "-f", str(root / "deploy/kubernetes/podway.yaml"))
    assert "created" in out
    assert "validatingadmissionpolicybinding.admissionregistration.k8s.io" in out
    assert "unchanged" in await kubectl.out("apply", "-f",
                                            str(root / "deploy/kubernetes/podway.yaml"))


async def test_server_side_apply_creates_and_merges(kubectl: Kubectl, tmp_path: Path) -> None:
    """``kubectl apply --server-side`` (docs/install.md applies the Gateway API CRDs so):
    creates, re-applies, merges a change; ownership of fields is not tracked."""
    manifest = tmp_path / "install.yaml"
    manifest.write_text(INSTALL)
    out = await kubectl.out("apply", "--server-side", "-f", str(manifest))
    assert "deployment.apps/web serverside-applied" in out
    assert kubectl.emu.get("deployments", "shop", "web", group="apps") is not None
    manifest.write_text(INSTALL.replace("image: podway-echo\n        ports",
                                        "image: podway-echo:2\n        ports"))
    await kubectl.run("apply", "--server-side", "-f", str(manifest))
    deploy = kubectl.emu.get("deployments", "shop", "web", group="apps")
    assert deploy is not None
    containers = deploy["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("web", "podway-echo:2"),
                                                             ("side", "podway-echo")]
    assert any(p.content_type == "application/apply-patch+yaml" for p in kubectl.emu.patches)
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: shop}\n"
                   "colour: red\n")
    refused = await kubectl.run("apply", "--server-side", "-f", str(bad), ok=False)
    assert 'unknown field "colour"' in refused.stderr


async def test_deleting_a_namespace_deletes_what_is_in_it(
        kubectl: Kubectl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the namespace controller: the namespace terminates, then its content and itself go;
    cluster-scoped objects and other namespaces stay."""
    # Terminating long enough for the kubectl calls below on a loaded machine (1 s was not).
    monkeypatch.setattr("podway.kube.emulator.server.NAMESPACE_FINALIZE_S", 5.0)
    manifest = tmp_path / "install.yaml"
    manifest.write_text(INSTALL)
    await kubectl.run("apply", "-f", str(manifest))
    await kubectl.run("create", "configmap", "keep", "-n", "default")
    await kubectl.run("delete", "namespace", "shop", "--wait=false")
    # Terminating: no new content, but what is in it can still be deleted (kubectl delete -f
    # of a file that starts with its namespace works as on a cluster).
    refused = await kubectl.run("create", "configmap", "late", "-n", "shop", ok=False)
    assert "unable to create new content in namespace shop because it is being terminated" \
        in refused.stderr
    assert "Terminating" in await kubectl.out("get", "namespace", "shop")
    await kubectl.run("delete", "-n", "shop", "serviceaccount", "podway")
    await kubectl.run("wait", "--for=delete", "namespace/shop", "--timeout=30s")
    emu = kubectl.emu
    assert emu.get("deployments", "shop", "web", group="apps") is None
    assert emu.get("serviceaccounts", "shop", "podway") is None
    assert emu.get("configmaps", "default", "keep") is not None
    assert emu.get("clusterroles", "", "podway") is not None  # cluster-scoped: stays
    refused = await kubectl.run("create", "configmap", "late", "-n", "shop", ok=False)
    assert 'namespaces "shop" not found' in refused.stderr


async def test_get_watch_prints_rows_as_they_change(tmp_path: Path) -> None:
    """``kubectl get -w``: the watch answers Table rows, so changes print in the same columns."""
    async with KubeEmulator() as emu:
        pod = {"metadata": {"name": "a", "namespace": "default"},
               "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}}
        emu.put("pods", pod)
        proc = await asyncio.create_subprocess_exec(
            "kubectl", "--server", emu.url, "--cache-dir", str(tmp_path / "cache"), "get",
            "pods", "-w", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            first = [(await proc.stdout.readline()).split() for _ in range(2)]
            assert first[0][:3] == [b"NAME", b"READY", b"STATUS"]
            assert first[1][:3] == [b"a", b"0/1", b"Pending"]
            emu.put("pods", {**pod, "status": {"phase": "Running"}})
            async with asyncio.timeout(20):
                changed = (await proc.stdout.readline()).split()
            assert changed[:3] == [b"a", b"0/1", b"Running"]
        finally:
            proc.terminate()
            await proc.communicate()
