"""The emulator serves ``pods/status`` as the readiness gate writes it: a strategic merge patch
whose ``conditions`` merge by ``type`` (the kubelet's stay), through kubernetes-asyncio."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator

SMP = "application/strategic-merge-patch+json"


@pytest.fixture
async def api() -> AsyncIterator[tuple[KubeEmulator, client.CoreV1Api]]:
    async with KubeEmulator() as emu, client.ApiClient(
            client.Configuration(host=emu.url)) as api_client:
        emu.put("pods", {"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "web-1", "namespace": "default"},
                         "spec": {"containers": [{"name": "c", "image": "echo"}]},
                         "status": {"phase": "Running", "conditions": [
                             {"type": "Ready", "status": "False"}]}})
        yield emu, client.CoreV1Api(api_client)


def condition(status: str) -> dict[str, object]:
    return {"status": {"conditions": [{"type": "podway.io/lb-ready", "status": status,
                                       "reason": "R",
                                       "lastTransitionTime": "2026-12-01T17:00:00Z"}]}}


async def test_a_condition_is_added_then_replaced_in_place(
        api: tuple[KubeEmulator, client.CoreV1Api]) -> None:
    emu, core = api
    await core.patch_namespaced_pod_status("web-1", "default", condition("False"),
                                           _content_type=SMP)
    await core.patch_namespaced_pod_status("web-1", "default", condition("True"),
                                           _content_type=SMP)
    stored = emu.get("pods", "default", "web-1")
    assert stored is not None
    assert [(c["type"], c["status"]) for c in stored["status"]["conditions"]] == [
        ("Ready", "False"), ("podway.io/lb-ready", "True")]
    assert emu.count("patch", "pods", "default", "web-1", "status") == 2


async def test_the_status_subresource_changes_nothing_but_status(
        api: tuple[KubeEmulator, client.CoreV1Api]) -> None:
    """A spec or label in a status patch is ignored, as the real server does."""
    emu, core = api
    body = {**condition("True"), "metadata": {"labels": {"x": "y"}},
            "spec": {"nodeName": "elsewhere"}}
    await core.patch_namespaced_pod_status("web-1", "default", body, _content_type=SMP)
    stored = emu.get("pods", "default", "web-1")
    assert stored is not None
    assert "x" not in (stored["metadata"].get("labels") or {})
    assert "nodeName" not in stored["spec"]
