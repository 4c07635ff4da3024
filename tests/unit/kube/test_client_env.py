"""The API client reads the environment (proxy, .netrc) once, not in worker threads per request,
unless the environment applies to the API's address (then nothing changes)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from podway.kube.client import without_env_lookups

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
              "all_proxy", "no_proxy")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    return netrc


async def raw_version(api: client.ApiClient) -> None:
    resp = await client.VersionApi(api).get_code(_preload_content=False)
    assert resp.status == 200
    resp.release()


async def test_requests_no_longer_hop_to_threads(clean_env: Path) -> None:
    """Each request through kubernetes_asyncio's session made two worker-thread hops (the
    .netrc file, the proxy variables); after ``without_env_lookups`` none."""
    app = web.Application()

    async def version(_request: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "30"})

    app.router.add_get("/version/", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    loop = asyncio.get_running_loop()
    hops = 0
    original = loop.run_in_executor

    def counting(*args: Any) -> Any:
        nonlocal hops
        hops += 1
        return original(*args)

    loop.run_in_executor = counting  # type: ignore[method-assign]
    try:
        async with client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")) as api:
            await raw_version(api)
            before = hops
            assert before >= 1  # the library's own behaviour, which this changes
            assert without_env_lookups(api)
            hops = 0
            for _ in range(3):
                await raw_version(api)
            assert hops == 0
    finally:
        loop.run_in_executor = original  # type: ignore[method-assign]
        await runner.cleanup()


async def test_kept_when_a_proxy_applies(clean_env: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://198.18.0.1:3128")
    async with client.ApiClient(client.Configuration(host="https://198.18.0.2:6443")) as api:
        assert not without_env_lookups(api)
        assert api.rest_client.pool_manager.trust_env


async def test_kept_when_netrc_names_the_host(clean_env: Path) -> None:
    clean_env.write_text("machine 198.18.0.2 login u password p\n")
    async with client.ApiClient(client.Configuration(host="https://198.18.0.2:6443")) as api:
        assert not without_env_lookups(api)
        assert api.rest_client.pool_manager.trust_env


async def test_changed_when_no_proxy_excludes_the_host(clean_env: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://198.18.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "198.18.0.2")
    async with client.ApiClient(client.Configuration(host="https://198.18.0.2:6443")) as api:
        assert without_env_lookups(api)
        assert not api.rest_client.pool_manager.trust_env
