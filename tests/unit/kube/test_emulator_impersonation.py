"""RBAC for the install's own identities, through the real kubectl (issue 29.2): the
administrator acts as a ServiceAccount with ``kubectl --as`` (impersonation headers) and is
then held to that account's RBAC, as on a cluster; a ServiceAccount token cannot impersonate.
The accounts and roles are deploy/kubernetes/podway.yaml's (the chart's default render)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from podway.kube.emulator import KubeEmulator
from tests.unit.kube.test_emulator_kubectl_session import Kubectl

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "deploy/kubernetes/podway.yaml"
NS = "podway-system"


def engine_account() -> str:
    """The ServiceAccount the engine's pods run as (its Deployment's, else ``default``)."""
    for doc in yaml.safe_load_all(MANIFESTS.read_text()):
        if doc and doc.get("kind") == "Deployment" and \
                doc["metadata"]["name"].startswith("podway-engine"):
            return str(doc["spec"]["template"]["spec"].get("serviceAccountName", "default"))
    raise AssertionError("no engine Deployment in the manifests")


async def test_kubectl_as_a_service_account_is_held_to_its_rbac(tmp_path: Path) -> None:
    async with KubeEmulator(require_namespaces=True, tls=True) as emu:
        kubectl = Kubectl(emu, tmp_path / "cache")
        emu.install_gateway_api()
        await kubectl.run("create", "namespace", NS)
        await kubectl.run("apply", "-f", str(ROOT / "deploy/helm/podway/crds/"))
        await kubectl.run("apply", "-f", str(MANIFESTS))
        await kubectl.run("create", "secret", "generic", "-n", NS, "probe",
                          "--from-literal=k=v")

        def account(name: str) -> tuple[str, str]:
            return ("--as", f"system:serviceaccount:{NS}:{name}")

        engine = account(engine_account())
        denied = await kubectl.run(*engine, "get", "secrets", "-n", NS, ok=False)
        assert denied.stderr.strip() == (
            f'Error from server (Forbidden): secrets is forbidden: User '
            f'"system:serviceaccount:{NS}:{engine_account()}" cannot list resource "secrets" '
            f'in API group "" in the namespace "{NS}"')
        assert (await kubectl.run(*engine, "auth", "can-i", "get", "secrets", "-n", NS,
                                  ok=False)).stdout.strip() == "no"
        agent = account("podway-agent")
        await kubectl.run(*agent, "get", "secret", "probe", "-n", NS, ok=False)
        assert (await kubectl.out(*agent, "auth", "can-i", "patch", "pods", "-n",
                                  "default")).strip() == "yes"
        assert (await kubectl.run(*agent, "auth", "can-i", "delete", "pods", "-n", "default",
                                  ok=False)).stdout.strip() == "no"
        controller = account("podway-controller")
        assert "probe" in await kubectl.out(*controller, "get", "secrets", "-n", NS)
        who = await kubectl.out(*controller, "auth", "whoami")
        assert f"system:serviceaccount:{NS}:podway-controller" in who
        assert "system:serviceaccounts" in who
        # A user who is not a ServiceAccount: only its groups' bindings (none here).
        await kubectl.run("--as", "jane", "get", "pods", "-n", NS, ok=False)
        # The administrator itself is not checked.
        assert "probe" in await kubectl.out("get", "secrets", "-n", NS)
        # A ServiceAccount's own token cannot impersonate (no impersonate rule is served).
        token = (await kubectl.out("create", "token", "-n", NS, "podway-agent")).strip()
        refused = await kubectl.run("--token", token, *controller, "get", "secrets", "-n", NS,
                                    ok=False)
        assert 'cannot impersonate resource "users"' in refused.stderr


async def test_service_account_tokens_outlive_a_restart_with_the_same_key() -> None:
    """Tokens are signed: a new emulator given the same key (the lab's control plane after a
    restart) still knows them; another key does not."""
    first = KubeEmulator(tls=True)
    token = first.issue_token("shop", "reader.v1")
    again = KubeEmulator(tls=True)
    again.set_credentials(admin_token=first.admin_token,
                          token_key=first._store.token_key)
    assert again._store.token_account(token) == ("shop", "reader.v1")
    assert KubeEmulator(tls=True)._store.token_account(token) is None
    assert again._store.token_account(token[:-2] + "xx") is None


async def test_a_csr_made_with_a_pod_token_names_its_service_account_and_node() -> None:
    """The API server stamps a CertificateSigningRequest with the requester: for a pod's
    bound token, its ServiceAccount and node (``authentication.kubernetes.io/node-name``), which
    the controller's NodePortLocal key check relies on (it saw ``system:anonymous``)."""
    import aiohttp

    async with KubeEmulator() as emu:
        emu.put("clusterroles", {"metadata": {"name": "csr"}, "rules": [
            {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
             "verbs": ["create"]}]})
        emu.put("clusterrolebindings", {
            "metadata": {"name": "csr"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "csr"},
            "subjects": [{"kind": "ServiceAccount", "name": "podway-agent",
                          "namespace": "podway"}]})
        token = emu.issue_token("podway", "podway-agent", node="lab-node-2")
        csr = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": "npl"},
               "spec": {"request": "", "signerName": "podway.io/npl", "username": "forged",
                        "usages": ["digital signature"]}}
        async with aiohttp.ClientSession() as http, http.post(
                f"{emu.url}/apis/certificates.k8s.io/v1/certificatesigningrequests", json=csr,
                headers={"Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == 201, await resp.text()
        stored = emu.get("certificatesigningrequests", "", "npl")
        assert stored is not None
        assert stored["spec"]["username"] == "system:serviceaccount:podway:podway-agent"
        assert "system:serviceaccounts:podway" in stored["spec"]["groups"]
        assert stored["spec"]["extra"] == {"authentication.kubernetes.io/node-name":
                                           ["lab-node-2"]}
