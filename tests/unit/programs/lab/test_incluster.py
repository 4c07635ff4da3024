"""What makes a lab pod an in-cluster client (issue 29.1): the API on HTTPS with the lab's CA
for every name a pod or the host uses, ServiceAccount tokens that survive a control-plane
restart and are held to RBAC, the credential files and variables a pod gets, and cluster names
in its /etc/hosts."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp
from cryptography import x509

from podway.programs.lab import podenv
from podway.programs.lab.api import LabApi
from podway.programs.lab.controlplane import ControlPlane, admit_service
from podway.programs.lab.pki import LabPki
from podway.programs.lab.plan import API_IP, KUBERNETES_IP
from tests import builders

Obj = dict[str, Any]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_api_certificate_names_every_address_and_is_signed_by_the_lab_ca(
        tmp_path: Path) -> None:
    pki = LabPki(tmp_path / "pki").ensure()
    cert = x509.load_pem_x509_certificate(pki.api_cert.read_bytes())
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(a) for a in alt.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1", "198.18.0.1", KUBERNETES_IP}
    assert "kubernetes.default.svc" in alt.get_values_for_type(x509.DNSName)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert oct(pki.ca_key.stat().st_mode & 0o777) == "0o600"
    assert oct(pki.folder.stat().st_mode & 0o777) == "0o700"
    again = LabPki(tmp_path / "pki").ensure()  # a restart keeps everything
    assert again.api_cert.read_bytes() == pki.api_cert.read_bytes()
    assert again.admin_token == pki.admin_token


async def test_the_control_plane_serves_https_and_tokens_outlive_a_restart(
        tmp_path: Path) -> None:
    """Over HTTPS (the lab's CA): the administrator's token reads anything; a ServiceAccount
    token is held to RBAC, a forged one is 401, and a token issued
    before a restart still works after it."""
    pki = LabPki(tmp_path / "pki").ensure()
    port = free_port()
    cp = ControlPlane(port=port, store=tmp_path / "store.json", pki=pki)
    await cp.start()
    try:
        api = LabApi(port, ca=pki.ca_cert.read_bytes(), token=pki.admin_token)
        secrets = "/api/v1/namespaces/default/secrets"
        code, _ = await asyncio.to_thread(api.call, "GET", secrets)
        assert code == 200
        token = cp.emu.issue_token("default", "app")
        await cp.restart()
        as_app = LabApi(port, ca=pki.ca_cert.read_bytes(), token=token)
        code, body = await asyncio.to_thread(as_app.call, "GET", secrets)
        assert code == 403, body
        assert 'User "system:serviceaccount:default:app" cannot list resource "secrets"' in \
            body["message"]
        forged = LabApi(port, ca=pki.ca_cert.read_bytes(), token=token[:-3] + "abc")
        assert (await asyncio.to_thread(forged.call, "GET", secrets))[0] == 401
        context = ssl.create_default_context()  # the system's CAs do not trust the lab's
        async with aiohttp.ClientSession() as http:
            try:
                await http.get(f"https://127.0.0.1:{port}/version", ssl=context)
            except aiohttp.ClientConnectorCertificateError:
                pass
            else:
                raise AssertionError("the lab's certificate was trusted without its CA")
    finally:
        await cp.stop()


def test_no_service_is_given_the_kubernetes_service_address() -> None:
    first = builders.service("a", kind_fields=False)
    admit_service(first, None, [])
    assert first["spec"]["clusterIP"] != KUBERNETES_IP
    assert ipaddress.ip_address(first["spec"]["clusterIP"]) > ipaddress.ip_address(KUBERNETES_IP)


def pod(**spec: Any) -> Obj:
    return {"metadata": {"name": "engine-1", "namespace": "podway"},
            "spec": {"containers": [{"name": "engine"}], **spec}}


def test_the_token_is_mounted_unless_the_pod_or_its_account_says_no(tmp_path: Path) -> None:
    assert podenv.service_account(pod()) == "default"
    assert podenv.service_account(pod(serviceAccountName="podway-engine")) == "podway-engine"
    assert podenv.automount(pod(), None)
    assert not podenv.automount(pod(), {"automountServiceAccountToken": False})
    assert podenv.automount(pod(automountServiceAccountToken=True),
                            {"automountServiceAccountToken": False})
    assert not podenv.automount(pod(automountServiceAccountToken=False), None)
    mount = podenv.token_mount({"name": "c"}, tmp_path)
    assert mount == [{"destination": podenv.TOKEN_DIR, "type": "bind", "source": str(tmp_path),
                      "options": ["rbind", "ro", "nosuid", "nodev"]}]
    own = {"volumeMounts": [{"name": "x", "mountPath": podenv.TOKEN_DIR + "/"}]}
    assert podenv.token_mount(own, tmp_path) == []
    podenv.write_files(tmp_path / "sa", token="t0k", ca=b"CA", namespace="podway", gid=None)
    assert {p.name: p.read_text() for p in (tmp_path / "sa").iterdir()} == {
        "token": "t0k", "ca.crt": "CA", "namespace": "podway"}
    assert podenv.service_env()["KUBERNETES_SERVICE_HOST"] == KUBERNETES_IP
    assert podenv.service_env()["KUBERNETES_SERVICE_PORT"] == "443"


def test_cluster_names_are_the_lab_dns_servers_not_etc_hosts() -> None:
    """The names a pod's resolver asks (the search list a kubelet writes) are answered by the
    lab's DNS server (podway.programs.lab.dns) at the API's address; /etc/hosts holds only
    localhost and the pod, as a kubelet writes it."""
    assert podenv.hosts(pod(), "198.18.1.5").splitlines() == [
        "127.0.0.1\tlocalhost", "::1\tlocalhost", "198.18.1.5\tengine-1"]
    conf = podenv.resolv_conf(pod()).splitlines()
    assert conf == [f"nameserver {API_IP}",
                    "search podway.svc.cluster.local svc.cluster.local cluster.local",
                    "options ndots:5"]


def test_a_named_probe_port_is_the_containers_port_of_that_name() -> None:
    """The chart probes ``port: metrics``: the kubelet resolves it (the lab's probe refused
    named ports, so such a pod was never Ready)."""
    from podway.programs.lab.podstatus import readiness_probe

    spec = pod(containers=[{"name": "controller", "ports": [
        {"name": "xds", "containerPort": 18000}, {"name": "metrics", "containerPort": 9090}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}}}])
    assert readiness_probe(spec) == {"httpGet": {"path": "/readyz", "port": 9090},
                                     "container": "controller"}  # for an exec probe
