"""Engines first, also for the CPU: with an engine connected, a state that changed what it holds
is written back (statuses) once the engine answered its push, or after a bound."""

from __future__ import annotations

import asyncio
from typing import Any

from podway.controller.main import Controller
from podway.pipeline import State
from podway.xds.protocol import Ack

from .bed import Bed, lb_service, until


def ingress(bed: Bed, name: str) -> list[Any]:
    obj = bed.emu.get("services", "default", name) or {}
    return list((obj.get("status") or {}).get("loadBalancer", {}).get("ingress") or [])


def has_listener(port: int) -> Any:
    return lambda s: any(ls.port == port for ls in s.ir.listeners)


async def engine_connected(bed: Bed, **overrides: Any) -> Controller:
    """A controller whose first statuses are written, then one engine stream counted as open
    (its answers are given by the test)."""
    bed.emu.put("services", lb_service("web", 9001))
    controller = await bed.start(**overrides)
    await until(lambda: bool(ingress(bed, "web")))
    assert controller.server is not None
    controller.server.servicer.streams = 1
    return controller


async def test_statuses_wait_for_the_engines_answer(bed: Bed) -> None:
    """The status pass of a new listener's state runs only after the engine's ACK of the last
    type pushed (here given 0.2 s after the state: long after an immediate pass)."""
    controller = await engine_connected(bed, status_after_push_s=30)
    assert controller.status is not None
    assert controller.server is not None
    answered: list[bool] = []
    seen: list[bool] = []
    original = controller.status.write

    async def spy(state: State) -> int:
        seen.append(bool(answered))
        return await original(state)

    controller.status.write = spy  # type: ignore[method-assign]
    bed.emu.put("services", lb_service("api", 9002))
    state = await bed.until(has_listener(9002))
    await asyncio.sleep(0.2)  # an immediate status pass would have run by now
    last = state.changed_types[-1]
    answered.append(True)
    controller.server.servicer.on_event(Ack(  # type: ignore[misc]
        node="engine-1", type_url=last, version=bed.pipeline.cache.get(last).version,
        nonce="n1"))
    await until(lambda: bool(ingress(bed, "api")))
    assert seen
    assert seen[0] is True


async def test_no_answer_delays_statuses_only_so_long(bed: Bed) -> None:
    """An engine that never answers holds the status pass back by ``status_after_push_s``,
    not longer."""
    await engine_connected(bed, status_after_push_s=0.2)
    bed.emu.put("services", lb_service("api", 9002))
    await until(lambda: bool(ingress(bed, "api")), limit_s=10)
