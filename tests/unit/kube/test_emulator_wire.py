"""The emulator through kubernetes-asyncio's real client: what informers and writers rely on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from podway.kube.emulator import KubeEmulator
from tests import builders
from tests.waiting import eventually

GW = "gateway.networking.k8s.io"
MERGE = "application/merge-patch+json"  # custom objects default to JSON patch: name it


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
async def api(emu: KubeEmulator) -> AsyncIterator[client.ApiClient]:
    async with client.ApiClient(client.Configuration(host=emu.url)) as api_client:
        yield api_client


def svc(name: str, **labels: str) -> dict[str, Any]:
    return builders.service(name, labels=labels)




async def events(stream: watch.Watch, func: Any, n: int, **kw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(10):
        async for event in stream.stream(func, timeout_seconds=30, **kw):
            out.append({"type": event["type"], **event["raw_object"]})
            if len(out) == n:
                break
    await stream.close()
    return out


async def test_discovery_serves_gateway_kinds_only_once_their_crd_exists(
        emu: KubeEmulator, api: client.ApiClient) -> None:
    """/apis lists a Gateway API group only after its CRD is created; deleting it stops it."""
    apis = client.ApisApi(api)
    groups = {g.name for g in (await apis.get_api_versions()).groups}
    assert "discovery.k8s.io" in groups
    assert GW not in groups
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as err:
        await custom.list_namespaced_custom_object(GW, "v1", "default", "httproutes")
    assert err.value.status == 404
    emu.install_crd("HTTPRoute")
    assert GW in {g.name for g in (await apis.get_api_versions()).groups}
    names = {r.name for r in (await client.CoreV1Api(api).get_api_resources()).resources}
    assert {"pods", "pods/status", "services", "nodes", "secrets", "events"} <= names
    await custom.create_namespaced_custom_object(GW, "v1", "default", "httproutes", {
        "apiVersion": f"{GW}/v1", "kind": "HTTPRoute", "metadata": {"name": "r"}, "spec": {}})
    listed = await custom.list_namespaced_custom_object(GW, "v1", "default", "httproutes")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["r"]
    emu.uninstall_crd("HTTPRoute")
    with pytest.raises(ApiException):
        await custom.list_namespaced_custom_object(GW, "v1", "default", "httproutes")


async def test_list_then_watch_resumes_from_version_and_410_after_compaction(
        emu: KubeEmulator, api: client.ApiClient) -> None:
    """A watch from a list's version sees exactly the later changes; older versions are 410."""
    core = client.CoreV1Api(api)
    emu.put("services", svc("a"))
    listed = await core.list_namespaced_service("default")
    version = listed.metadata.resource_version
    emu.put("services", svc("b"))
    emu.delete("services", "default", "a")
    got = await events(watch.Watch(), core.list_namespaced_service, 2,
                       namespace="default", resource_version=version)
    assert [(e["type"], e["metadata"]["name"]) for e in got] == [("ADDED", "b"),
                                                                 ("DELETED", "a")]
    emu.compact()
    with pytest.raises(ApiException) as err:
        await events(watch.Watch(), core.list_namespaced_service, 1,
                     namespace="default", resource_version=version)
    assert err.value.status == 410


async def test_bookmarks_only_when_allowed_and_selectors_filter(
        emu: KubeEmulator, api: client.ApiClient) -> None:
    """A watch with allowWatchBookmarks gets BOOKMARKs carrying the version; selectors filter."""
    core = client.CoreV1Api(api)
    version = (await core.list_namespaced_service("default")).metadata.resource_version
    stream = watch.Watch()
    task = asyncio.ensure_future(events(stream, core.list_namespaced_service, 2,
                                        namespace="default", resource_version=version,
                                        allow_watch_bookmarks=True, label_selector="app=web"))
    await eventually(lambda: emu.count("watch", "services", "default") == 1)
    await eventually(lambda: emu.watching("services") == 1)
    emu.put("services", svc("other", app="db"))
    emu.put("services", svc("web", app="web"))
    emu.send_bookmarks("services")  # queued behind the events: arrives after them
    got = await task
    assert [e["type"] for e in got] == ["ADDED", "BOOKMARK"]
    assert got[0]["metadata"]["name"] == "web"
    assert got[1]["metadata"]["resourceVersion"] == str(emu.version)


async def test_status_subresource_and_generation(emu: KubeEmulator,
                                                 api: client.ApiClient) -> None:
    """Spec writes bump generation and keep status; /status writes only status, not generation."""
    emu.install_crd("Gateway")
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": f"{GW}/v1", "kind": "Gateway", "metadata": {"name": "g"},
            "spec": {"gatewayClassName": "c"}, "status": {"ignored": True}}
    created = await custom.create_namespaced_custom_object(GW, "v1", "default", "gateways",
                                                           body)
    assert created["metadata"]["generation"] == 1
    assert "status" not in created
    status = {"status": {"conditions": [{"type": "Accepted", "status": "True"}]}}
    after = await custom.patch_namespaced_custom_object_status(GW, "v1", "default",
                                                               "gateways", "g", status,
                                                               _content_type=MERGE)
    assert after["metadata"]["generation"] == 1
    assert after["status"] == status["status"]
    assert int(after["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    spec = {"spec": {"gatewayClassName": "d"}, "status": {"conditions": []}}
    after = await custom.patch_namespaced_custom_object(GW, "v1", "default", "gateways", "g",
                                                        spec, _content_type=MERGE)
    assert after["metadata"]["generation"] == 2
    assert after["status"] == status["status"]  # main resource cannot change status
    assert emu.count("patch", "gateways", "default", "g", "status") == 1
    assert emu.count("patch", "gateways", "default", "g") == 1


async def test_patch_formats_and_conflicts(emu: KubeEmulator, api: client.ApiClient) -> None:
    """Merge, JSON and strategic patches apply as on a real server; stale updates get 409."""
    core = client.CoreV1Api(api)
    emu.put("pods", {"metadata": {"name": "p", "labels": {"a": "1"}},
                     "spec": {"containers": [{"name": "c", "image": "x"}]},
                     "status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    await core.patch_namespaced_pod("p", "default", [
        {"op": "add", "path": "/metadata/labels/b", "value": "2"}])
    await core.patch_namespaced_pod_status("p", "default", {
        "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}})
    pod = emu.get("pods", "default", "p")
    assert pod is not None
    assert pod["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert [c["type"] for c in pod["status"]["conditions"]] == ["Ready", "PodScheduled"]
    assert {p.content_type for p in emu.patches} == {"application/json-patch+json",
                                                     "application/strategic-merge-patch+json"}
    stale = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "1"}}
    with pytest.raises(ApiException) as err:
        await core.replace_namespaced_pod("p", "default", stale)
    assert err.value.status == 409
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}
    coord = client.CoordinationV1Api(api)
    await coord.create_namespaced_lease("default", lease)
    with pytest.raises(ApiException) as err:
        await coord.create_namespaced_lease("default", lease)
    assert err.value.status == 409
    await client.EventsV1Api(api).create_namespaced_event("default", {
        "metadata": {"name": "e1"}, "reason": "Synced", "type": "Normal",
        "eventTime": "2026-01-01T00:00:00.000000Z", "action": "Sync",
        "reportingController": "podway.io/controller", "reportingInstance": "c-1",
        "regarding": {"kind": "Pod", "namespace": "default", "name": "p"}})
    assert [e["reason"] for e in emu.events] == ["Synced"]


async def test_break_and_injected_failure_with_retry_after(emu: KubeEmulator) -> None:
    """A broken watch ends mid-stream; an injected 429 carries Retry-After once, then passes."""
    emu.fail(429, plural="nodes", retry_after=3)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{emu.url}/api/v1/nodes") as resp:
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "3"
        async with http.get(f"{emu.url}/api/v1/nodes") as resp:
            assert resp.status == 200
        version = emu.version
        async with http.get(f"{emu.url}/api/v1/nodes?watch=1&resourceVersion={version}") as resp:
            emu.put("nodes", {"metadata": {"name": "n1"}})
            first = await resp.content.readline()
            assert b'"ADDED"' in first
            emu.break_watches("nodes")
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.content.read()
