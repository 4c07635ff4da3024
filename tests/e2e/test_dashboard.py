"""The dashboard in a real headless Chromium, against a real stack (Podway + Envoy + echo).

Screenshots are kept under ``test-artifacts/dashboard/`` (git-ignored); the test prints where.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from podway.base.netaddr import HostPort

from .browser import Browser, find_chromium
from .harness import (
    SHOP_INGRESS,
    Stack,
    endpoints,
    eventually,
    free_port,
    get,
    make_stack,
    service,
)

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"


def chromium_or_skip() -> str:
    """The chromium binary; installed with apt when root and missing; else skip saying why."""
    found = find_chromium()
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=False,
                       capture_output=True, env={**os.environ,
                                                 "DEBIAN_FRONTEND": "noninteractive"})
        found = find_chromium()
    if found is None:
        pytest.skip("no chromium binary (Debian package `chromium`), and it could not be "
                    "installed here (needs root and apt-get)")
    return found


def two_member_manifests(port_a: int, port_b: int, *, b_ready: bool = True) -> str:
    """Service web with two EndpointSlices: member a at port_a, member b at port_b."""
    second = endpoints("web", {"TCP": port_b}, slice_name="web-2")
    if not b_ready:
        second = second.replace("{ready: true}", "{ready: false}")
    return (service("web", 80, port_a) + "---\n" + endpoints("web", {"TCP": port_a})
            + "---\n" + second + "---\n" + SHOP_INGRESS)


@pytest.fixture
async def dashboard_stack(tmp_path: Path) -> AsyncIterator[tuple[Stack, int]]:
    root = tmp_path / "manifests"
    root.mkdir()
    port = free_port()
    made = await make_stack(root, dashboard=HostPort("127.0.0.1", port),
                            dashboard_refresh_s=0.5)
    try:
        yield made, port
    finally:
        await made.stop()


async def test_page_shows_a_member_turning_unhealthy_live(
        dashboard_stack: tuple[Stack, int], tmp_path: Path) -> None:
    """The page loads from Podway alone, lists both members healthy, and — without a reload —
    shows the one whose EndpointSlice turns ready: false as unhealthy, with the reason."""
    binary = chromium_or_skip()
    stack, port = dashboard_stack
    a, b = await stack.start_echo("a"), await stack.start_echo("b")
    stack.write("web.yaml", two_member_manifests(a, b))
    await stack.start()
    status, _ = await get(stack.http_port, "shop.test", "/")
    assert status == 200
    browser = await Browser.start(binary, tmp_path / "chromium-profile")
    try:
        await browser.navigate(f"http://127.0.0.1:{port}/")
        member_b = f"[data-member$=':{b}']"
        await browser.wait_for(
            "document.querySelectorAll('[data-member][data-health=healthy]').length === 2",
            limit_s=30)
        await browser.evaluate("window.podwayMarker = 'same page'; true")
        shot = await browser.screenshot(ARTIFACTS / "healthy.png")
        print(f"dashboard screenshot: {shot}")

        generation = stack.state.generation
        stack.write("web.yaml", two_member_manifests(a, b, b_ready=False))
        await stack.applied(generation + 1)
        await browser.wait_for(
            f"document.querySelector(\"{member_b}\")?.dataset.health === 'unhealthy'",
            limit_s=30)
        assert await browser.evaluate("window.podwayMarker") == "same page"  # live, no reload
        why = await browser.evaluate(f"document.querySelector(\"{member_b}\").innerText")
        assert "not ready" in why
        healthy_a = await browser.evaluate(
            f"document.querySelector(\"[data-member$=':{a}']\").dataset.health")
        assert healthy_a == "healthy"
        shot = await browser.screenshot(ARTIFACTS / "unhealthy.png")
        print(f"dashboard screenshot: {shot}")
    finally:
        await browser.stop()


async def test_a_503_row_links_to_its_explain(dashboard_stack: tuple[Stack, int],
                                              tmp_path: Path) -> None:
    """A route whose only pool has no ready member shows 503 with an explain link; following
    it shows explain's report (503, the pool without a ready member) and the command line."""
    binary = chromium_or_skip()
    stack, port = dashboard_stack
    a, b = await stack.start_echo("a"), await stack.start_echo("b")
    stack.write("web.yaml", two_member_manifests(a, b).replace("{ready: true}",
                                                                "{ready: false}"))
    await stack.start()
    browser = await Browser.start(binary, tmp_path / "chromium-profile")
    try:
        await browser.navigate(f"http://127.0.0.1:{port}/")
        href = await browser.wait_for(
            "document.querySelector('[data-verdict=\"503\"] a.explain')?.href", limit_s=30)
        assert "/explain?url=" in href
        await browser.screenshot(ARTIFACTS / "verdict-503.png")
        await browser.navigate(href)
        command = await browser.wait_for(
            "document.getElementById('command')?.innerText", limit_s=30)
        assert command.startswith("podway explain --manifests ")
        assert command.endswith(f"http://shop.test:{stack.http_port}/")
        report = await browser.wait_for(
            "document.getElementById('report')?.innerText", limit_s=30)
        assert "503" in report
    finally:
        await browser.stop()
    status, _ = await get(stack.http_port, "shop.test", "/")
    assert status == 503  # what the page said is what Envoy does


async def test_state_and_events_serve_the_same_document(
        dashboard_stack: tuple[Stack, int]) -> None:
    """/api/state and the first server-sent event carry the same generation; Envoy's figures
    (read from its admin) count the requests sent; assets come from Podway; an explain URL
    that is not a URL is one clear 400 line."""
    stack, port = dashboard_stack
    a, b = await stack.start_echo("a"), await stack.start_echo("b")
    stack.write("web.yaml", two_member_manifests(a, b))
    await stack.start()
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/api/state") as response:
            state = await response.json()
        assert state["generation"] == stack.state.generation
        async with session.get(f"{base}/api/events") as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            line = await response.content.readline()
            event = json.loads(line.decode().removeprefix("data: "))
        assert event["generation"] == state["generation"]

        for _ in range(3):
            assert (await get(stack.http_port, "shop.test", "/"))[0] == 200

        async def counted() -> bool:
            async with session.get(f"{base}/api/state") as response:
                document = await response.json()
            pool, = document["pools"]
            listener, = document["listeners"]
            return (pool["traffic"] or {}).get("total", 0) >= 3 and (
                listener["traffic"] or {}).get("total", 0) >= 3

        await eventually(counted, within=20)
        for asset in ("dashboard.js", "dashboard.css"):
            async with session.get(f"{base}/static/{asset}") as response:
                assert response.status == 200
        async with session.get(f"{base}/static/../app.py") as response:
            assert response.status == 404
        async with session.get(f"{base}/explain?url=javascript:alert(1)") as response:
            assert response.status == 400
            assert (await response.text()).count("\n") == 1


async def test_haproxy_engines_traffic_figures_reach_the_dashboard(tmp_path: Path) -> None:
    """Under ``podway run --engine haproxy`` the dashboard's per-listener and per-pool figures
    come from HAProxy's own counters (``show stat``), as Envoy's come from its admin: the
    requests sent are counted."""
    root = tmp_path / "manifests"
    root.mkdir()
    port = free_port()
    stack = await make_stack(root, engine_kind="haproxy", dashboard=HostPort("127.0.0.1", port),
                             dashboard_refresh_s=0.5)
    try:
        a, b = await stack.start_echo("a"), await stack.start_echo("b")
        stack.write("web.yaml", two_member_manifests(a, b))
        await stack.start()
        for _ in range(3):
            assert (await get(stack.http_port, "shop.test", "/"))[0] == 200
        listener_traffic: dict[str, object] = {}

        async def counted() -> bool:
            nonlocal listener_traffic
            async with aiohttp.ClientSession() as session, session.get(
                    f"http://127.0.0.1:{port}/api/state") as response:
                document = await response.json()
            pool, = document["pools"]
            http = [ls for ls in document["listeners"] if (ls["traffic"] or {}).get("total")]
            listener_traffic = http[0]["traffic"] if http else {}
            return (pool["traffic"] or {}).get("total", 0) >= 3 and \
                listener_traffic.get("total", 0) >= 3

        await eventually(counted, within=20)
    finally:
        await stack.stop()
