"""A listener replaced by another on its port, in an update big enough to go in parts, with a
real Envoy: one response carries the removal and the add (``podway.envoy.xds.parts``).

Envoy refuses a listener on the address of one it still has ("duplicate address"). With the
update cut by name, ``l/0`` (the new one) went in the first part beside a change and ``l/z``
(the old one, same port) was removed in the second: Envoy refused ``l/0``, and once ``l/z`` was
gone the port refused connections until ``l/0``'s refusal backoff ran out.
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest

from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.protocol import Event, Nack
from podway.envoy.xds.server import XdsServer
from podway.ir import IR, Listener, Member, Pool
from podway.ir import ListenerProtocol as Protocol
from tests.unit.envoy.xds.helpers import route, vhost

from .harness import echo_backend, engine_on, eventually, free_port, get

pytestmark = pytest.mark.e2e


def _config(listeners: dict[str, tuple[int, str]], members: dict[str, int], hops: int) -> IR:
    """A listener per name: (port, the pool its one host ``x.test`` goes to)."""
    return IR(listeners=tuple(
        Listener(name=name, address="127.0.0.1", port=port, protocol=Protocol.HTTP,
                 virtual_hosts=(vhost("x.test", route(f"r-{name}", "/", f"pool/{pool}")),),
                 xff_trusted_hops=hops)
        for name, (port, pool) in listeners.items()),
        pools=MappingProxyType({f"pool/{n}": Pool(name=f"pool/{n}", members=(
            Member(address="127.0.0.1", port=p),)) for n, p in members.items()}))


async def _answers(port: int, name: str) -> bool:
    try:
        status, data = await get(port, "x.test")
    except OSError:
        return False
    return status == 200 and data.get("name") == name


async def test_a_listener_replaced_on_its_port_in_a_big_update_never_closes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DeltaStream, "most_per_response", 2)  # 4 changes: two parts
    nacks: list[Nack] = []

    def on_event(event: Event) -> None:
        if isinstance(event, Nack):
            nacks.append(event)

    old_port, old_task = await echo_backend("old")
    new_port, new_task = await echo_backend("new")
    members = {"old": old_port, "new": new_port}
    shared, other1, other2 = free_port(), free_port(), free_port()
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config(
        {"l/z": (shared, "old"), "l/c": (other1, "old"), "l/d": (other2, "old")}, members, 0)))
    server = XdsServer(cache, "127.0.0.1:0", on_event=on_event, unauthenticated=True)
    await server.start()
    try:
        async with engine_on(server, node_id="swap", delta=True):
            await eventually(lambda: _answers(shared, "old"), within=20)
            # l/z leaves, l/0 takes its port; l/c and l/d change: sorted, l/0 comes first.
            cache.set(builder.build(_config(
                {"l/0": (shared, "new"), "l/c": (other1, "old"), "l/d": (other2, "old")},
                members, 1)))
            refused = 0
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 3.0
            while loop.time() < deadline:  # the port answers throughout, old then new
                if not (await _answers(shared, "old") or await _answers(shared, "new")):
                    refused += 1
                await asyncio.sleep(0.01)
            assert await _answers(shared, "new")
            assert refused == 0
            assert nacks == []
    finally:
        await server.stop(0)
        for task in (old_task, new_task):
            task.cancel()



async def test_a_listener_refused_for_its_port_serves_as_soon_as_the_port_is_freed() -> None:
    """``l/0`` comes while ``l/z`` still holds its port: Envoy refuses it ("duplicate
    address"). The update that removes ``l/z`` carries ``l/0`` again in the same response (its
    refusal's backoff would have left the port closed meanwhile): no further refusal, and the
    port answers throughout."""
    nacks: list[Nack] = []

    def on_event(event: Event) -> None:
        if isinstance(event, Nack):
            nacks.append(event)

    old_port, old_task = await echo_backend("old")
    new_port, new_task = await echo_backend("new")
    members = {"old": old_port, "new": new_port}
    shared = free_port()
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config({"l/z": (shared, "old")}, members, 0)))
    server = XdsServer(cache, "127.0.0.1:0", on_event=on_event, unauthenticated=True)
    await server.start()
    try:
        async with engine_on(server, node_id="swap-refused", delta=True):
            await eventually(lambda: _answers(shared, "old"), within=20)
            cache.set(builder.build(_config({"l/z": (shared, "old"), "l/0": (shared, "new")},
                                            members, 0)))
            await eventually(lambda: bool(nacks), within=10)
            assert [n.resources for n in nacks] == [("l/0",)]
            cache.set(builder.build(_config({"l/0": (shared, "new")}, members, 0)))
            refused = 0
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 0.8  # within the refusal's first backoff (1 s)
            while loop.time() < deadline:
                if not (await _answers(shared, "old") or await _answers(shared, "new")):
                    refused += 1
                await asyncio.sleep(0.01)
            assert await _answers(shared, "new")
            assert refused == 0
            assert len(nacks) == 1
    finally:
        await server.stop(0)
        for task in (old_task, new_task):
            task.cancel()
