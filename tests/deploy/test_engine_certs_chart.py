"""The chart's default engine certificates (issue 23.10): one service account per engine group,
no certificate files (each engine asks the controller for its own), and RBAC that lets an engine
create and read certificate requests only, and the controller approve and sign for Podway's
engine signer only — evaluated with the emulator's RBAC authorizer, as the API server would."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from podway.kube.emulator.rbac import Attributes, User, allowed
from tests.deploy.helm import helm_python, render
from tests.deploy.test_hardening import Policy
from tests.deploy.test_manifests import PLAIN, by_kind, controller_command, validate

NS = "podway-system"
CSR = "certificatesigningrequests"


@pytest.fixture(scope="module")
def objects() -> list[Any]:
    return [d for d in yaml.safe_load_all(PLAIN.read_text()) if d]


def may(objects: list[Any], account: str, verb: str, resource: str, *, sub: str = "",
        name: str = "", namespace: str = "", group: str = "certificates.k8s.io") -> bool:
    of = {kind: [o for o in objects if o["kind"] == kind] for kind in
          ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")}
    return allowed(User.service_account(NS, account),
                   Attributes(verb=verb, group=group, resource=resource, subresource=sub,
                              namespace=namespace, name=name),
                   roles=of["Role"], cluster_roles=of["ClusterRole"],
                   bindings=of["RoleBinding"], cluster_bindings=of["ClusterRoleBinding"])


def test_each_engine_group_has_its_own_account_and_no_certificate_files(
        objects: list[Any]) -> None:
    by_kind(objects, "ServiceAccount", "podway-engine-edge")
    spec = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "podway-engine-edge"
    assert spec["automountServiceAccountToken"] is True  # the request needs its bound token
    args = spec["containers"][0]["args"]
    assert not [a for a in args if a.startswith(("--xds-client-cert", "--xds-client-key"))]
    assert "--xds-ca=/etc/podway/xds/ca.crt" in args
    volume = next(v for v in spec["volumes"] if v["name"] == "xds-tls")
    assert volume == {"name": "xds-tls", "configMap": {
        "name": "podway-xds-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    controller = by_kind(objects, "Deployment", "podway-controller")
    params = controller_command(controller["spec"]["template"]["spec"]["containers"][0]["args"])
    # The group serves everything (onlyItsObjects false): its certificates name no group.
    assert params["engine_account"] == [f"system:serviceaccount:{NS}:podway-engine-edge="]
    assert params["engine_ca_secret"] == "podway-engine-ca"


def test_engines_may_only_ask_for_and_read_certificate_requests(objects: list[Any]) -> None:
    engine = "podway-engine-edge"
    assert may(objects, engine, "create", CSR)
    assert may(objects, engine, "get", CSR, name="podway-engine-n1-abc")
    for verb, sub in (("list", ""), ("update", "approval"), ("update", "status")):
        assert not may(objects, engine, verb, CSR, sub=sub), (verb, sub)
    assert not may(objects, engine, "approve", "signers", name="podway.io/engine-client")
    assert not may(objects, engine, "get", "secrets", group="", namespace=NS,
                   name="podway-engine-ca")


def test_the_controller_approves_and_signs_for_the_engine_signer_only(
        objects: list[Any]) -> None:
    controller = "podway-controller"
    for verb in ("approve", "sign"):
        assert may(objects, controller, verb, "signers", name="podway.io/engine-client")
        for other in ("kubernetes.io/kube-apiserver-client", "kubernetes.io/kubelet-serving",
                      "podway.io/*"):
            assert not may(objects, controller, verb, "signers", name=other), (verb, other)
    assert may(objects, controller, "update", CSR, sub="approval", name="x")
    assert may(objects, controller, "update", CSR, sub="status", name="x")
    assert may(objects, controller, "watch", CSR)
    assert may(objects, controller, "create", "secrets", group="", namespace=NS)
    assert not may(objects, controller, "create", "secrets", group="", namespace="shop")


def test_engines_may_ask_only_the_engine_signer(objects: list[Any]) -> None:
    """RBAC cannot say which signer a request names; the chart's admission policy does."""
    policy = Policy(objects, "podway-engine-csrs")

    def denied(user: str, signer: str) -> list[str]:
        request = {"spec": {"signerName": signer, "request": "", "usages": ["client auth"]}}
        return policy.denied(user=user, node="n1", old=None, new=request)

    engine = f"system:serviceaccount:{NS}:podway-engine-edge"
    assert denied(engine, "podway.io/engine-client") == []
    for other in ("kubernetes.io/kube-apiserver-client", "podway.io/npl-key"):
        assert denied(engine, other) == ["a Podway engine may ask only the signer "
                                         "podway.io/engine-client"], other
    # Anyone else is not this policy's business (the agent asks podway.io/npl-key).
    assert denied(f"system:serviceaccount:{NS}:podway-agent", "podway.io/npl-key") == []


async def test_files_or_cert_manager_instead() -> None:
    """source secret: the group's Secret, no API access for the engine, no signer."""
    python = helm_python()
    if python is None:
        pytest.skip("no Python >= 3.12 with helm-sdkpy (see tests/deploy/helm.py)")
    lint, objects = await render(python, {"engineCertificates": {"source": "secret"}})
    assert lint["Errors"] is None
    validate(objects)
    spec = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert "--xds-client-cert=/etc/podway/xds/tls.crt" in spec["containers"][0]["args"]
    assert not [o for o in objects if o["metadata"]["name"] in (
        "podway-engine-certificates", "podway-engine-csrs")]
    controller = by_kind(objects, "Deployment", "podway-controller")
    params = controller_command(controller["spec"]["template"]["spec"]["containers"][0]["args"])
    assert not params["engine_account"]
    assert not may(objects, "podway-controller", "sign", "signers",
                   name="podway.io/engine-client")


async def test_the_lab_install_keeps_the_group_secret() -> None:
    """``podway lab up --install`` creates the group Secret and names it (not yet run with
    the csr default): the chart renders its engines with those files."""
    python = helm_python()
    if python is None:
        pytest.skip("no Python >= 3.12 with helm-sdkpy (see tests/deploy/helm.py)")
    from podway.programs.lab.install import ENGINE_SECRET, values

    lint, objects = await render(python, values("0.1.0"))
    assert lint["Errors"] is None
    spec = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    assert "--xds-client-cert=/etc/podway/xds/tls.crt" in spec["containers"][0]["args"]
    volume = next(v for v in spec["volumes"] if v["name"] == "xds-tls")
    assert volume["secret"] == {"secretName": ENGINE_SECRET}
