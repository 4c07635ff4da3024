"""The dashboard app: live documents over server-sent events, and a stream that ends with the
app; no engine request while nobody watches."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from podway.pipeline import State
from podway.readers.dashboard.app import DashboardOptions, Hub, make_app
from podway.readers.dashboard.view import ViewOptions

from .test_view import state as make_state


class Provider:
    """A state provider fed by the test, with the pipeline's coalescing contract."""

    def __init__(self) -> None:
        self.state: State | None = None
        self._changed = asyncio.Event()

    def publish(self, state: State) -> None:
        self.state = state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def states(self) -> AsyncIterator[State]:
        seen = None
        while True:
            if self.state is not None and self.state is not seen:
                seen = self.state
                yield seen
            await self._changed.wait()


async def next_event(lines: asyncio.StreamReader) -> dict[str, object]:
    while True:
        line = (await lines.readline()).decode()
        if line.startswith("data: "):
            document: dict[str, object] = json.loads(line.removeprefix("data: "))
            return document


async def test_a_stream_gets_each_new_state_and_ends_with_the_app() -> None:
    """The first event is the current document; a new state is pushed without asking; closing
    the app ends the open stream at once (the browser's EventSource then reconnects)."""
    provider = Provider()
    asked: list[int] = []

    def admin() -> None:
        asked.append(1)

    app = make_app(provider, engine_admin=admin,
                   options=DashboardOptions(view=ViewOptions(refresh_s=3600)))
    server = TestServer(app)
    await server.start_server()
    session = aiohttp.ClientSession()
    try:
        first_state = make_state()
        provider.publish(first_state)
        response = await session.get(server.make_url("/api/events"))
        first = await asyncio.wait_for(next_event(response.content), 10)
        if first["ready"] is False:  # the stream opened before the hub saw the state
            first = await asyncio.wait_for(next_event(response.content), 10)
        assert first["generation"] == first_state.generation
        provider.publish(make_state(a_ready=False))
        second = await asyncio.wait_for(next_event(response.content), 10)
        pool, = second["pools"]  # type: ignore[misc]
        assert {m["health"] for m in pool["members"]} == {"healthy", "unhealthy"}
        assert asked == []  # states alone never ask the engine
        await server.close()
        rest = await asyncio.wait_for(response.content.read(), 10)  # EOF, not a time-out
        assert rest.strip() == b""
    finally:
        await session.close()
        await server.close()


async def test_api_state_looks_at_the_engine_once_when_nobody_watches() -> None:
    """/api/state with no stream open samples the engine then (not on a timer)."""
    provider = Provider()
    asked: list[int] = []

    def admin() -> None:
        asked.append(1)

    app = make_app(provider, engine_admin=admin,
                   options=DashboardOptions(view=ViewOptions(refresh_s=3600)))
    async with TestClient(TestServer(app)) as client:
        provider.publish(make_state())
        response = await client.get("/api/state")
        assert response.status == 200
        assert asked == [1]
        response = await client.get("/explain", params={"url": "ftp://x"})
        assert response.status == 400


def with_health_check(state: State, *, on: bool = True) -> State:
    """``state`` with an active HTTP check on every pool (``on=False``: with none)."""
    from dataclasses import replace
    from types import MappingProxyType

    from podway.ir import HealthCheck, HealthCheckKind

    check = HealthCheck(kind=HealthCheckKind.HTTP, http_path="/healthz") if on else None
    pools = {name: replace(pool, settings=replace(pool.settings, health_check=check))
             for name, pool in state.ir.pools.items()}
    ir = replace(state.ir, pools=MappingProxyType(pools))
    return replace(state, result=replace(state.result, ir=ir))


async def test_envoy_member_health_is_asked_only_when_a_pool_has_a_check() -> None:
    """Without active checks one admin request (/stats) per sample; with them /clusters too,
    and a member failing Envoy's check shows unhealthy with Envoy's reason."""
    from aiohttp import web

    paths: list[str] = []

    async def stats(request: web.Request) -> web.Response:
        paths.append(request.path)
        return web.json_response({"stats": []})

    async def clusters(request: web.Request) -> web.Response:
        paths.append(request.path)
        return web.json_response({"cluster_statuses": [{"name": "pool/shop/web/80",
                                                        "host_statuses": [{
            "address": {"socket_address": {"address": "10.1.0.2", "port_value": 8080}},
            "health_status": {"eds_health_status": "HEALTHY",
                              "failed_active_health_check": True}}]}]})

    engine = web.Application()
    engine.router.add_get("/stats", stats)
    engine.router.add_get("/clusters", clusters)
    async with TestServer(engine) as admin_server:
        address = f"127.0.0.1:{admin_server.port}"
        provider = Provider()
        hub = Hub(provider, options=DashboardOptions(), engine_admin=lambda: address)
        provider.publish(with_health_check(make_state(), on=False))
        await hub.look()
        assert paths == ["/stats"]
        member = {m["address"]: m for m in hub.document["pools"][0]["members"]}["10.1.0.2"]
        assert member["health"] == "healthy"
        paths.clear()
        provider.publish(with_health_check(make_state()))
        await hub.look()
        assert paths == ["/stats", "/clusters"]
        member = {m["address"]: m for m in hub.document["pools"][0]["members"]}["10.1.0.2"]
        assert (member["health"], member["why"]) == ("unhealthy", "failed active health check")


async def test_a_refusal_stays_in_recent_nacks_after_it_clears() -> None:
    """An engine NACK shows under refusals while in force, and under recently seen after."""
    from dataclasses import replace

    from podway.pipeline import Rejection

    provider = Provider()
    hub = Hub(provider, options=DashboardOptions(), engine_admin=None)
    follower = asyncio.create_task(hub._follow())  # the hub's state reader alone
    try:
        base = make_state()
        refused = Rejection(node="edge", type_url="type.googleapis.com/x.Listener",
                            resource="ingress/http", version="3", message="cannot bind")
        hub.watchers = 1  # a page is open: every state is built at once
        provider.publish(replace(base, version=base.version + 1, rejections=(refused,)))
        await asyncio.wait_for(hub.newer(1, wait_s=10), 10)
        assert [r["resource"] for r in hub.document["rejections"]] == ["ingress/http"]
        seq = hub.seq
        provider.publish(replace(base, version=base.version + 2))
        await asyncio.wait_for(hub.newer(seq, wait_s=10), 10)
        assert hub.document["rejections"] == []
        recent, = hub.document["recent_nacks"]
        assert (recent["node"], recent["message"]) == ("edge", "cannot bind")
    finally:
        follower.cancel()


async def test_only_requests_for_this_server_are_answered() -> None:
    """DNS rebinding: a page served under another name gets 421 and no document; loopback
    names, IP literals and the configured names get the document."""
    app = make_app(Provider(), options=DashboardOptions(view=ViewOptions(refresh_s=3600),
                                                        hosts=("dash.example",)))
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        for host in ("evil.example", "evil.example:8080", "localhost.evil.example",
                     "127.0.0.1.evil.example", "", "a b", "x@127.0.0.1"):
            response = await client.get("/api/state", headers={"Host": host})
            assert response.status == 421, host
            assert b"generation" not in await response.read()
        for host in ("localhost", "LOCALHOST:8080", "app.localhost", "127.0.0.1:9",
                     "[::1]:8080", "198.18.0.1", "dash.example", "dash.example:80"):
            response = await client.get("/api/state", headers={"Host": host})
            assert response.status == 200, host
    finally:
        await client.close()


async def test_a_cross_origin_post_is_refused() -> None:
    """A request that is not a read must come from the page's own origin."""
    app = make_app(Provider(), options=DashboardOptions(view=ViewOptions(refresh_s=3600)))
    app.router.add_post("/api/poke", _ok)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        host = {"Host": "127.0.0.1:8080"}
        for extra in ({"Origin": "http://evil.example"}, {"Origin": "http://127.0.0.1:9"},
                      {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}):
            response = await client.post("/api/poke", headers={**host, **extra})
            assert response.status == 403, extra
        for extra in ({"Origin": "http://127.0.0.1:8080"}, {}):
            response = await client.post("/api/poke", headers={**host, **extra})
            assert response.status == 200, extra
    finally:
        await client.close()


async def _ok(_: object) -> web.Response:
    return web.Response(text="ok")
