"""Each agent gets its own node's key from the controller, never another's (issue 23.9).

The agent asks through a CertificateSigningRequest; the emulator stamps the requester from the
bearer token as the API server does (``spec.username``, ``spec.extra``); the controller's
``NplKeyIssuer`` seals the key of that node to the request's public key."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from tests.waiting import eventually

from podway.base.errors import EnvironmentProblem
from podway.kube import npl_keys
from podway.kube.emulator import KubeEmulator
from podway.model import npl
from podway.programs.agent.keyrequest import request_node_key
from podway.programs.controller.npl_keys import NplKeyIssuer

MASTER = b"m" * 32
AGENT = "system:serviceaccount:podway-system:podway-agent"
NODE = npl_keys.NODE_EXTRA


def user(emu: KubeEmulator, token: str, name: str, node: str | None) -> None:
    emu.add_user(token, name, groups=("system:serviceaccounts",),
                 extra={NODE: [node]} if node else None)


@contextlib.asynccontextmanager
async def as_token(emu: KubeEmulator, token: str) -> AsyncIterator[client.ApiClient]:
    config = client.Configuration(host=emu.url)
    config.api_key = {"BearerToken": token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(configuration=config) as api:
        yield api


@pytest.fixture
async def issuer(emu: KubeEmulator) -> AsyncIterator[NplKeyIssuer]:
    user(emu, "controller", "system:serviceaccount:podway-system:podway-controller", None)
    async with as_token(emu, "controller") as api:
        issuing = NplKeyIssuer(api, master=MASTER, agent_user=AGENT, retry_s=0.05)
        task = asyncio.create_task(issuing.run())
        try:
            yield issuing
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_each_agent_gets_its_own_nodes_key(emu: KubeEmulator,
                                                 issuer: NplKeyIssuer) -> None:
    user(emu, "agent-n1", AGENT, "n1")
    user(emu, "agent-n2", AGENT, "n2")
    async with as_token(emu, "agent-n1") as a1, as_token(emu, "agent-n2") as a2:
        k1, k2 = await asyncio.wait_for(asyncio.gather(
            request_node_key(a1, "n1", poll_s=0.05), request_node_key(a2, "n2", poll_s=0.05)),
            timeout=10)
    assert k1 == npl.node_key(MASTER, "n1")
    assert k2 == npl.node_key(MASTER, "n2")
    assert k1 != k2
    # What anyone reading the requests sees: neither key, nor the master.
    seen = json.dumps(emu.objects("certificatesigningrequests"))
    for secret in (k1, k2, MASTER):
        assert base64.b64encode(secret).decode() not in seen
        assert base64.urlsafe_b64encode(secret).decode().rstrip("=") not in seen


async def create(api: client.ApiClient, body: dict[str, Any]) -> str:
    certs: Any = client.CertificatesV1Api(api)
    made = await certs.create_certificate_signing_request(body)
    return str(made.metadata.name)


def answer(emu: KubeEmulator, name: str) -> dict[str, str]:
    found = emu.get("certificatesigningrequests", "", name)
    assert found is not None
    annotations: dict[str, str] = found["metadata"].get("annotations") or {}
    return annotations


@pytest.mark.parametrize("case", [
    # root on n2 with n2's agent token asks for n1's key
    (AGENT, "n2", "n1", "runs on 'n2'"),
    # another service account (a tenant's pod) asks for a node's key
    ("system:serviceaccount:tenant:default", "n1", "n1", "not the agent"),
    # a token bound to no node (an old Kubernetes, a long-lived token)
    (AGENT, None, "n1", "names no node"),
])
async def test_a_request_for_another_nodes_key_is_refused(
        emu: KubeEmulator, issuer: NplKeyIssuer, case: tuple[str, str | None, str, str]) -> None:
    who, node, asks, words = case
    user(emu, "asker", who, node)
    private = npl_keys.new_private_key()
    body = npl_keys.csr_object(private, asks)
    body["spec"]["username"] = AGENT  # what a client writes there is replaced by the server
    body["spec"]["extra"] = {NODE: [asks]}
    async with as_token(emu, "asker") as api:
        name = await create(api, body)
    await eventually(lambda: answer(emu, name))
    assert npl_keys.SEALED_ANNOTATION not in answer(emu, name)
    assert words in answer(emu, name)[npl_keys.REFUSED_ANNOTATION]


async def test_the_agent_stops_with_the_controllers_reason(emu: KubeEmulator,
                                                           issuer: NplKeyIssuer) -> None:
    user(emu, "old-token", AGENT, None)
    async with as_token(emu, "old-token") as api:
        with pytest.raises(EnvironmentProblem, match=r"refused this agent.*names no node"):
            await asyncio.wait_for(request_node_key(api, "n1", poll_s=0.05), timeout=10)


def test_a_sealed_key_opens_only_with_the_requests_private_key() -> None:
    mine, other = npl_keys.new_private_key(), npl_keys.new_private_key()
    request = npl_keys.csr_object(mine, "n1")["spec"]["request"]
    sealed = npl_keys.seal(request, b"secret-of-n1")
    assert npl_keys.open_sealed(mine, sealed) == b"secret-of-n1"
    with pytest.raises(npl_keys.SealError):
        npl_keys.open_sealed(other, sealed)
    tampered = sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB")
    with pytest.raises(npl_keys.SealError):
        npl_keys.open_sealed(mine, tampered)
