"""What ``lab up --install`` gives the chart before ``helm install`` (pure parts): the xDS
Secrets signed by the lab's CA for the names the chart's pods use, and the values."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from podway.programs.lab.install import (
    ENGINE_SECRET,
    NAMESPACE,
    XDS_CA,
    XDS_SECRET,
    tls_secrets,
    values,
)
from podway.programs.lab.pki import LabPki


def test_the_xds_secrets_name_the_service_and_the_edge_nodes(tmp_path: Path) -> None:
    pki = LabPki(tmp_path / "pki").ensure()
    secrets = {s["metadata"]["name"]: s for s in tls_secrets(pki, ["lab-node-1"])}
    assert set(secrets) == {XDS_SECRET, ENGINE_SECRET, XDS_CA}
    assert secrets[XDS_CA]["data"] == {"ca.crt": pki.ca_cert.read_text()}
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())

    def cert(name: str) -> x509.Certificate:
        data = secrets[name]["data"]
        assert base64.b64decode(data["ca.crt"]) == pki.ca_cert.read_bytes()
        found = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
        found.verify_directly_issued_by(ca)
        return found

    server = cert(XDS_SECRET)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"podway-xds.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    client = cert(ENGINE_SECRET)
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert client.subject.rfc4514_string() == "CN=lab-node-1"


def test_values_run_the_image_of_the_archive_on_the_edge_node() -> None:
    chosen = values("0.1.0", "kernel")
    assert chosen["image"] == {"repository": "podway", "tag": "0.1.0", "pullPolicy": "Never"}
    group = chosen["engineGroups"][0]
    assert (group["engine"], group["replicas"], group["nodeSelector"]) == (
        "kernel", 1, {"podway.io/edge": "true"})
    assert chosen["controller"]["replicas"] == 2
    assert values("0.1.0")["engineGroups"][0]["engine"] == "envoy"


def test_values_choose_the_chart_s_l2_mode_on_the_nodes_interface() -> None:
    """--install-reachability l2: the chart's L2 mode on the fabric interface (eth0 in every
    node); the default stays none (the edge router routes the pool to the engine node)."""
    assert values("0.1.0", "envoy", "l2")["reachability"]["mode"] == "l2"
    assert values("0.1.0", "envoy", "l2")["reachability"]["l2"]["interface"] == "eth0"
    assert values("0.1.0")["reachability"]["mode"] == "none"


def test_lab_up_refuses_an_unknown_reachability_in_one_line() -> None:
    from podway.base.errors import ConfigError
    from podway.cli.commands.lab import _check_install

    with pytest.raises(ConfigError, match="--install-reachability must be none or l2"):
        _check_install("envoy", "bgp")
