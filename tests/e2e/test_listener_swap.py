"""A listener replaced by another on its port, in an update big enough to go in parts, with a
real Envoy: one response carries the removal and the add (``podway.envoy.xds.parts``).

Envoy refuses a listener on the address of one it still has ("duplicate address"). With the
update cut by name, ``l/0`` (the new one) went in the first part beside a change and ``l/z``
(the old one, same port) was removed in the second: Envoy refused ``l/0``, and once ``l/z`` was
gone the port refused connections until ``l/0``'s refusal backoff ran out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import MappingProxyType

import pytest

from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.protocol import Nack
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


@dataclass
class Bed:
    """A cache served to one delta Envoy, two echo members and the NACKs it sent."""

    cache: Cache
    builder: Builder
    members: dict[str, int]
    nacks: list[Nack] = field(default_factory=list)

    def serve(self, listeners: dict[str, tuple[int, str]], hops: int = 0) -> None:
        self.cache.set(self.builder.build(_config(listeners, self.members, hops)))

    async def never_closed(self, port: int, seconds: float) -> int:
        """Probes of ``port`` over ``seconds`` that neither member answered."""
        refused = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline:
            if not (await _answers(port, "old") or await _answers(port, "new")):
                refused += 1
            await asyncio.sleep(0.01)
        return refused


@contextlib.asynccontextmanager
async def _bed(node_id: str, first: dict[str, tuple[int, str]]) -> AsyncIterator[Bed]:
    tasks = []
    members = {}
    for name in ("old", "new"):
        members[name], task = await echo_backend(name)
        tasks.append(task)
    bed = Bed(Cache(), Builder(), members)
    bed.serve(first)
    server = XdsServer(bed.cache, "127.0.0.1:0", unauthenticated=True,
                       on_event=lambda e: bed.nacks.append(e) if isinstance(e, Nack) else None)
    await server.start()
    try:
        async with engine_on(server, node_id=node_id, delta=True):
            yield bed
    finally:
        await server.stop(0)
        for task in tasks:
            task.cancel()


async def test_a_listener_replaced_on_its_port_in_a_big_update_never_closes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DeltaStream, "most_per_response", 2)  # 4 changes: two parts
    shared, other1, other2 = free_port(), free_port(), free_port()
    async with _bed("swap", {"l/z": (shared, "old"), "l/c": (other1, "old"),
                             "l/d": (other2, "old")}) as bed:
        await eventually(lambda: _answers(shared, "old"), within=20)
        # l/z leaves, l/0 takes its port; l/c and l/d change: sorted, l/0 comes first.
        bed.serve({"l/0": (shared, "new"), "l/c": (other1, "old"), "l/d": (other2, "old")},
                  hops=1)
        assert await bed.never_closed(shared, 3.0) == 0  # old, then new, throughout
        assert await _answers(shared, "new")
        assert bed.nacks == []


async def test_a_listener_refused_for_its_port_serves_as_soon_as_the_port_is_freed() -> None:
    """``l/0`` comes while ``l/z`` still holds its port: Envoy refuses it ("duplicate
    address"). The update that removes ``l/z`` carries ``l/0`` again in the same response (its
    refusal's backoff would have left the port closed meanwhile): no further refusal, and the
    port answers throughout."""
    shared = free_port()
    async with _bed("swap-refused", {"l/z": (shared, "old")}) as bed:
        await eventually(lambda: _answers(shared, "old"), within=20)
        bed.serve({"l/z": (shared, "old"), "l/0": (shared, "new")})
        await eventually(lambda: bool(bed.nacks), within=10)
        assert [n.resources for n in bed.nacks] == [("l/0",)]
        bed.serve({"l/0": (shared, "new")})
        # Within the refusal's first backoff (1 s).
        assert await bed.never_closed(shared, 0.8) == 0
        assert await _answers(shared, "new")
        assert len(bed.nacks) == 1
