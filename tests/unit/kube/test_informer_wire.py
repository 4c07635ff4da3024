"""The shared informer against the emulator: nothing is lost across breaks, 410s and bookmarks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.kube.emulator import KubeEmulator
from podway.kube.informer import Informer
from tests import builders
from tests.waiting import eventually


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        yield emulator


class Cache:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str]] = []

    def __call__(self, kind: str, raw: dict[str, Any]) -> None:
        name = raw["metadata"]["name"]
        self.log.append((kind, name))
        if kind == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = raw


def svc(name: str, port: int = 80) -> dict[str, Any]:
    return builders.service(name, port, kind_fields=False,
                            extra_meta={"managedFields": [{"manager": "kubectl"}]})


async def test_breaks_compaction_and_relist_lose_nothing(emu: KubeEmulator) -> None:
    """Across a dropped watch and a 410 the cache converges; a re-list reports only changes."""
    emu.put("services", svc("a"))
    emu.put("services", svc("b"))
    cache = Cache()
    async with client.ApiClient(client.Configuration(host=emu.url)) as api:
        informer = Informer(name="services", params={}, handler=cache,
                            lister=client.CoreV1Api(api).list_service_for_all_namespaces,
                            backoff=Backoff(base=0.01, jitter=0))
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.ready.wait(), 10)
            assert "managedFields" not in cache.objects["a"]["metadata"]  # lean by default
            await eventually(lambda: emu.watching("services") == 1)
            emu.break_watches("services")
            emu.put("services", svc("c"))  # while the watch is down
            await eventually(lambda: "c" in cache.objects)
            await eventually(lambda: emu.watching("services") == 1)
            cache.log.clear()
            emu.delete("services", "default", "a", notify=False)  # nobody hears of it
            emu.put("services", svc("b", port=81))
            emu.compact()
            await eventually(lambda: "a" not in cache.objects)
            await eventually(lambda: cache.objects["b"]["spec"]["ports"][0]["port"] == 81)
            assert ("MODIFIED", "c") not in cache.log  # unchanged: not re-reported
            assert informer.relists >= 1
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert set(cache.objects) == {"b", "c"}


async def test_bookmark_moves_the_resume_point(emu: KubeEmulator) -> None:
    """After a BOOKMARK the next watch resumes from the bookmark's version, not the list's."""
    emu.put("services", svc("a"))
    cache = Cache()
    async with client.ApiClient(client.Configuration(host=emu.url)) as api:
        informer = Informer(name="services", params={}, handler=cache,
                            lister=client.CoreV1Api(api).list_service_for_all_namespaces,
                            backoff=Backoff(base=0.01, jitter=0))
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.ready.wait(), 10)
            await eventually(lambda: emu.watching("services") == 1)
            emu.put("nodes", {"metadata": {"name": "n1"}})  # moves the global version only
            emu.send_bookmarks("services")
            bookmarked = emu.version
            await eventually(lambda: informer.bookmarks > 0)
            emu.break_watches("services")
            await eventually(lambda: any(f"resourceVersion={bookmarked}" in r and "watch=" in r
                                    for r in emu.requests))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_watch_builds_no_api_client_of_its_own(emu: KubeEmulator,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Watches go through the caller's client: none makes its own ``ApiClient`` (each one is a
    session and a TLS context with the CA bundle, ~0.75 MiB: the controller has ~20 watches)."""
    emu.put("services", svc("a"))
    cache = Cache()
    async with client.ApiClient(client.Configuration(host=emu.url)) as api:
        made: list[object] = []
        original = client.ApiClient.__init__

        def counting(self: client.ApiClient, *args: Any, **kwargs: Any) -> None:
            made.append(self)
            original(self, *args, **kwargs)

        monkeypatch.setattr(client.ApiClient, "__init__", counting)
        informer = Informer(name="services", params={}, handler=cache,
                            lister=client.CoreV1Api(api).list_service_for_all_namespaces,
                            backoff=Backoff(base=0.01, jitter=0))
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.ready.wait(), 10)
            await eventually(lambda: emu.watching("services") == 1)
            emu.put("services", svc("b"))
            await eventually(lambda: "b" in cache.objects)
            emu.break_watches("services")
            await eventually(lambda: emu.watching("services") == 1)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert made == []


async def test_a_watch_event_of_several_mebibytes_is_read_not_relisted(
        emu: KubeEmulator) -> None:
    """A Service with 6 MiB of annotations (past the client's 4 MiB line buffer), created and
    changed while watched, reaches the handler from the watch itself: the watch does not break
    and nothing is relisted."""
    cache = Cache()
    async with client.ApiClient(client.Configuration(host=emu.url)) as api:
        informer = Informer(name="services", params={}, handler=cache,
                            lister=client.CoreV1Api(api).list_service_for_all_namespaces,
                            backoff=Backoff(base=0.01, jitter=0))
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.ready.wait(), 10)
            await eventually(lambda: emu.watching("services") == 1)
            big = svc("big")
            big["metadata"]["annotations"] = {f"k{i}": "x" * 1000 for i in range(6000)}
            emu.put("services", big)
            await eventually(lambda: "big" in cache.objects)
            big["metadata"]["annotations"]["k0"] = "changed"
            emu.put("services", big)
            await eventually(lambda: cache.objects["big"]["metadata"]["annotations"]["k0"]
                        == "changed")
            emu.put("services", svc("small"))
            await eventually(lambda: "small" in cache.objects)
            assert informer.relists == 0
            assert emu.watching("services") == 1
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
