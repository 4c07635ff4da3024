"""The controller's own CA signs each engine a certificate for its node and group only, through
the CertificateSigningRequest API (issue 23.10): the emulator stamps the requester as the API
server does, and refuses a certificate on a request nobody approved."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography import x509
from kubernetes_asyncio import client

from podway.engines.identity import from_pem
from podway.kube import engine_certs
from podway.kube.emulator import KubeEmulator
from podway.kube.npl_keys import NODE_EXTRA, new_private_key
from podway.programs.controller.engine_certs import EngineCertSigner
from tests.waiting import eventually

EDGE = "system:serviceaccount:podway-system:podway-engine-edge"


@contextlib.asynccontextmanager
async def as_token(emu: KubeEmulator, token: str) -> AsyncIterator[client.ApiClient]:
    config = client.Configuration(host=emu.url)
    config.api_key = {"BearerToken": token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(configuration=config) as api:
        yield api


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        yield emulator


async def ask(emu: KubeEmulator, *, node: str, cn: str, group: str = "edge") -> str:
    token = f"engine-on-{node}"
    emu.add_user(token, EDGE, extra={NODE_EXTRA: [node]})
    pem = engine_certs.engine_request(new_private_key(), node=cn, group=group)
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "engine-"},
            "spec": {"signerName": engine_certs.SIGNER, "usages": ["client auth"],
                     "request": base64.b64encode(pem).decode()}}
    async with as_token(emu, token) as api:
        made = await client.CertificatesV1Api(api).create_certificate_signing_request(body)
    return str(made.metadata.name)


def status(emu: KubeEmulator, name: str) -> dict[str, Any]:
    found = emu.get("certificatesigningrequests", "", name)
    assert found is not None
    return dict(found.get("status") or {})


async def test_engines_get_certificates_for_their_own_node_and_group_only(
        emu: KubeEmulator) -> None:
    emu.add_user("controller", "system:serviceaccount:podway-system:podway-controller")
    async with as_token(emu, "controller") as api:
        signer = EngineCertSigner(api, namespace="podway-system", ca_secret="podway-engine-ca",
                                  users={EDGE: "edge"})
        task = asyncio.create_task(signer.run())
        try:
            good = await ask(emu, node="n1", cn="n1")
            forged = await ask(emu, node="n2", cn="n1")  # root on n2 asks for n1's identity
            await eventually(lambda: status(emu, good).get("certificate"), within=10)
            await eventually(lambda: status(emu, forged).get("conditions"), within=10)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    pem = base64.b64decode(status(emu, good)["certificate"])
    identity = from_pem(pem)
    assert identity.refusal(node="n1", group="edge") is None
    assert identity.refusal(node="n2", group="edge") is not None
    secret = emu.get("secrets", "podway-system", "podway-engine-ca")
    assert secret is not None  # made by the controller: the CA the engines' chain ends in
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    x509.load_pem_x509_certificate(pem).verify_directly_issued_by(ca)
    assert signer.ca_pem == base64.b64decode(secret["data"]["ca.crt"])
    denied = status(emu, forged)
    assert "certificate" not in denied
    assert [c["type"] for c in denied["conditions"]] == ["Denied"]
    assert "runs on 'n2'" in denied["conditions"][0]["message"]


async def test_a_certificate_needs_an_approval_first(emu: KubeEmulator) -> None:
    """As the API server: status.certificate on a request without Approved is refused."""
    name = await ask(emu, node="n1", cn="n1")
    async with as_token(emu, "anyone") as api:
        certs = client.CertificatesV1Api(api)
        found = await certs.read_certificate_signing_request(name)
        found.status = client.V1CertificateSigningRequestStatus(
            certificate=base64.b64encode(b"not approved").decode())
        with pytest.raises(client.ApiException) as refused:
            await certs.replace_certificate_signing_request_status(name, found)
    assert refused.value.status == 422
