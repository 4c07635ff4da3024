"""A NACK never blocks unrelated resources, with a real Envoy (delta and state of the world).

One Service has a member Envoy refuses (``999.1.1.1``); the good Services' endpoint changes
still apply, and a fresh Envoy serves them at once (before: 503 for its 15 s initial fetch
timeout). A listener whose port is busy at start comes back once the port is free.
"""

from __future__ import annotations

import asyncio
import socket
from types import MappingProxyType

import pytest

from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.protocol import Event, Nack
from podway.envoy.xds.server import XdsServer
from podway.ir import IR, Listener, Member, Pool
from podway.ir import ListenerProtocol as Protocol
from tests.unit.envoy.xds.helpers import route, vhost

from .harness import echo_backend, engine_on, eventually, free_port, get

pytestmark = pytest.mark.e2e
MODES = ["delta", "sotw"]


def _config(http: int, members: dict[str, int], *, extra: tuple[Listener, ...] = ()) -> IR:
    hosts = [vhost(f"{n}.test", route(f"r-{n}", "/", f"pool/{n}")) for n in members]
    listener = Listener(name="listener/http", address="127.0.0.1", port=http,
                        protocol=Protocol.HTTP, virtual_hosts=(*hosts, vhost(
                            "bad.test", route("r-bad", "/", "pool/bad"))))
    pools = {f"pool/{n}": Pool(name=f"pool/{n}", members=(Member(address="127.0.0.1",
                                                                  port=p),))
             for n, p in members.items()}
    pools["pool/bad"] = Pool(name="pool/bad", members=(Member(address="999.1.1.1", port=80),))
    return IR(listeners=(listener, *extra), pools=MappingProxyType(pools))


async def _serves(port: int, host: str, name: str) -> bool:
    status, data = await get(port, host)
    return status == 200 and data.get("name") == name


@pytest.mark.parametrize("mode", MODES)
async def test_bad_assignment_does_not_block_other_services(mode: str) -> None:
    """Good Services' endpoint changes apply beside a refused assignment, the refusal names
    it, and a freshly started Envoy serves the good Services at once."""
    named = asyncio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, Nack) and event.resources == ("pool/bad",):
            named.set()

    backends = {}
    tasks = []
    for name in ("a", "a2", "b"):
        port, task = await echo_backend(name)
        backends[name] = port
        tasks.append(task)
    http = free_port()
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config(http, {"a": backends["a"], "b": backends["b"]})))
    server = XdsServer(cache, "127.0.0.1:0", on_event=on_event, unauthenticated=True)
    await server.start()
    try:
        async with engine_on(server, node_id="refusals", delta=mode == "delta"):
            await eventually(lambda: _serves(http, "a.test", "a"), within=20)
            await asyncio.wait_for(named.wait(), 10)  # the refusal names the bad assignment
            # An endpoint change of a good Service: applies although pool/bad is still bad.
            cache.set(builder.build(_config(http, {"a": backends["a2"], "b": backends["b"]})))
            await eventually(lambda: _serves(http, "a.test", "a2"), within=10)
        async with engine_on(server, node_id="refusals", delta=mode == "delta") as engine:
            # A fresh Envoy is LIVE well before its 15 s initial fetch timeout (which held every
            # listener while the refused assignment was awaited), and serves at once.
            await engine.wait_ready(limit_s=10)
            assert await _serves(http, "b.test", "b")
            assert (await get(http, "bad.test"))[0] == 503  # only the bad Service fails
    finally:
        await server.stop(0)
        for task in tasks:
            task.cancel()


@pytest.mark.parametrize("mode", MODES)
async def test_listener_on_a_busy_port_comes_back_when_freed(mode: str) -> None:
    """A listener whose port is taken is refused (named), the others serve; once the port is
    free the listener is offered again (backoff) and serves."""
    port, task = await echo_backend("a")
    http, busy_port = free_port(), free_port()
    busy = socket.socket()
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy.bind(("127.0.0.1", busy_port))
    busy.listen()
    second = Listener(name="listener/second", address="127.0.0.1", port=busy_port,
                      protocol=Protocol.HTTP, virtual_hosts=(
                          vhost("a.test", route("r-a2", "/", "pool/a")),))
    nacks: list[Nack] = []
    refused = asyncio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, Nack) and "listener/second" in event.resources:
            nacks.append(event)
            refused.set()

    cache = Cache()
    cache.set(Builder().build(_config(http, {"a": port}, extra=(second,))))
    server = XdsServer(cache, "127.0.0.1:0", on_event=on_event, unauthenticated=True)
    await server.start()
    try:
        async with engine_on(server, node_id="refusals", delta=mode == "delta"):
            await asyncio.wait_for(refused.wait(), 20)
            await eventually(lambda: _serves(http, "a.test", "a"), within=10)
            busy.close()
            await eventually(lambda: _serves(busy_port, "a.test", "a"), within=20)
    finally:
        busy.close()
        await server.stop(0)
        task.cancel()
