"""``raw_request``: a request below kubernetes_asyncio's generated layer keeps the client's
headers and credentials (the emulator's RBAC tells whose request it was)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from podway.kube.client import raw_request
from podway.kube.emulator import KubeEmulator
from tests import builders

PATH = "/api/v1/namespaces/shop/services/web/status"
BODY = {"status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.7"}]}}}


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        emulator.put("services", builders.service("web", 80, None, namespace="shop"))
        yield emulator


def configuration(emu: KubeEmulator, token: str | None) -> client.Configuration:
    cfg = client.Configuration(host=emu.url)
    if token is not None:
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return cfg


async def patch(emu: KubeEmulator, token: str | None) -> tuple[int, dict[str, object]]:
    async with client.ApiClient(configuration(emu, token)) as api:
        resp = await raw_request(api, "PATCH", PATH, body=BODY,
                                 content_type="application/merge-patch+json")
        try:
            return resp.status, json.loads(await resp.read())
        finally:
            resp.release()


async def test_the_clients_token_is_sent(emu: KubeEmulator) -> None:
    """A service account allowed nothing is refused (its token was sent: without one the
    emulator takes the caller for its administrator); the administrator's token writes."""
    status, _ = await patch(emu, emu.issue_token("shop", "nobody"))
    assert status == 403
    assert "198.18.0.7" not in json.dumps(emu.get("services", "shop", "web"))
    status, answer = await patch(emu, emu.admin_token)
    assert status == 200
    stored = emu.get("services", "shop", "web") or {}
    assert stored["status"] == BODY["status"]
    assert answer["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
