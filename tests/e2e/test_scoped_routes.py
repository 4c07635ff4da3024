"""Scoped route tables with a real Envoy: exact hosts served, unknown hosts 404, hosts added and
removed live, host matching case-insensitive and port-blind, and the switch to the one-table form
(a wildcard host added) and back with no failed request for the hosts that were served.

The threshold is lowered (``Builder(scoped_min_hosts=3)``) so a few hosts are served as scopes;
with one bucket (``scoped.TABLES`` = 1) every scope names the same shared table, so a host
added or removed edits the table the others are served from. Delta engines get the scopes;
state-of-the-world engines the one-table form of the same configuration
(``podway.envoy.xds.access.TableForm``), with the same answers.
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest

from podway.envoy import types
from podway.envoy.config import Builder, scoped
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.protocol import Ack, Event, Nack
from podway.envoy.xds.server import XdsServer
from podway.ir import IR, Listener, Member, Pool, WildcardMode
from podway.ir import ListenerProtocol as Protocol
from tests.unit.envoy.xds.helpers import route, vhost

from .harness import echo_backend, engine_on, eventually, free_port, get

pytestmark = pytest.mark.e2e
MODES = ["delta", "sotw"]


def _config(http: int, ports: dict[str, int], hosts: dict[str, str], *,
            wildcard: bool = False) -> IR:
    """``hosts``: hostname → the backend (name in ``ports``) it is routed to."""
    vhosts = [vhost(h, route(f"r-{h}", "/", f"pool/{b}")) for h, b in hosts.items()]
    if wildcard:
        vhosts.append(vhost("*.wild.test", route("r-wild", "/", "pool/b"),
                            wildcard=WildcardMode.SUFFIX))
    listener = Listener(name="listener/http", address="127.0.0.1", port=http,
                        protocol=Protocol.HTTP, virtual_hosts=tuple(vhosts))
    pools = {f"pool/{n}": Pool(name=f"pool/{n}", members=(Member(address="127.0.0.1",
                                                                  port=p),))
             for n, p in ports.items()}
    return IR(listeners=(listener,), pools=MappingProxyType(pools))


async def _status(port: int, host: str, want: int, name: str | None = None) -> bool:
    status, data = await get(port, host)
    return status == want and (name is None or data.get("name") == name)


@pytest.mark.parametrize("tables", [1, scoped.TABLES])
@pytest.mark.parametrize("mode", MODES)
async def test_scoped_tables_serve_and_switch_form_without_failures(
        mode: str, tables: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoped, "TABLES", tables)
    acked: set[str] = set()
    nacks: list[Nack] = []

    def on_event(event: Event) -> None:
        if isinstance(event, Ack):
            acked.add(event.type_url)
        elif isinstance(event, Nack):
            nacks.append(event)

    ports: dict[str, int] = {}
    tasks = []
    for name in ("a", "b"):
        ports[name], task = await echo_backend(name)
        tasks.append(task)
    http = free_port()
    hosts = {"h0.test": "a", "h1.test": "b", "h2.test": "a"}
    cache, builder = Cache(), Builder(scoped_min_hosts=3)
    cache.set(builder.build(_config(http, ports, hosts)))
    assert len(cache.get(types.SCOPE).resources) == 3
    shared = [n for n in cache.get(types.ROUTE).resources if n != "listener/http"]
    assert len(shared) == (1 if tables == 1 else 3)
    server = XdsServer(cache, "127.0.0.1:0", on_event=on_event, unauthenticated=True)
    await server.start()
    try:
        async with engine_on(server, node_id="scoped", delta=mode == "delta"):
            await eventually(lambda: _status(http, "h0.test", 200, "a"), within=20)
            assert await _status(http, "h1.test", 200, "b")
            assert await _status(http, "H1.Test", 200, "b")  # case-insensitive
            assert await _status(http, "h2.test:8080", 200, "a")  # the port is not the key
            assert await _status(http, "nowhere.test", 404)
            assert (types.SCOPE in acked) == (mode == "delta")

            hosts["h3.test"] = "b"  # a host added live
            cache.set(builder.build(_config(http, ports, hosts)))
            await eventually(lambda: _status(http, "h3.test", 200, "b"), within=10)
            del hosts["h1.test"]  # and one removed
            cache.set(builder.build(_config(http, ports, hosts)))
            await eventually(lambda: _status(http, "h1.test", 404), within=10)

            # The form switches (a wildcard host needs the one table) and back, under load.
            failures: list[str] = []
            served = 0
            stop = asyncio.Event()

            async def load() -> None:
                nonlocal served
                while not stop.is_set():
                    for host, backend in (("h0.test", "a"), ("h3.test", "b")):
                        status, data = await get(http, host)
                        if status != 200 or data.get("name") != backend:
                            failures.append(f"{host}: {status}")
                        served += 1

            loader = asyncio.create_task(load())
            try:
                cache.set(builder.build(_config(http, ports, hosts, wildcard=True)))
                assert not cache.get(types.SCOPE).resources
                await eventually(lambda: _status(http, "x.y.wild.test", 200, "b"), within=10)
                cache.set(builder.build(_config(http, ports, hosts)))
                assert len(cache.get(types.SCOPE).resources) == 3
                await eventually(lambda: _status(http, "x.y.wild.test", 404), within=10)
                await eventually(lambda: _status(http, "H3.TEST", 200, "b"), within=10)
            finally:
                stop.set()
                await loader
            assert served > 0
            assert not failures
            assert await _status(http, "h2.test", 200, "a")
            assert not nacks
    finally:
        await server.stop(0)
        for task in tasks:
            task.cancel()
