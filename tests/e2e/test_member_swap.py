"""Every member of a pool replaced at once, under load, with the default active checks on:
no request fails (docs/design/health-and-changes.md).

Standalone mode, file edits: an HTTP pool (Ingress → Service) and a TCP pool (LoadBalancer
Service) each get an EndpointSlice that names only new members, back and forth. The TCP case
also swaps to a member that starts listening only after the change (its first check fails): the
departing member carries the pool until the new one passes a check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from podway.tools.echo import Health as EchoHealth

from .harness import SHOP_INGRESS, Stack, echo_backend, endpoints, free_port, get, service

pytestmark = pytest.mark.e2e


@dataclass
class Load:
    """Requests in a loop; who answered and every failure (event-driven waits only)."""

    ask: Callable[[], Awaitable[str]]
    answers: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    answered: asyncio.Condition = field(default_factory=asyncio.Condition)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        for _ in range(20000):  # bounded
            if self.stop.is_set():
                return
            try:
                name = await self.ask()
            except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
                self.failures.append(repr(exc))
                name = ""
            async with self.answered:
                self.answers.append(name)
                self.answered.notify_all()
            await asyncio.sleep(0.002)

    async def answered_by(self, name: str, times: int = 5, limit_s: float = 20) -> None:
        async with asyncio.timeout(limit_s), self.answered:
            await self.answered.wait_for(lambda: self.answers[-times:] == [name] * times)


async def _http(port: int) -> str:
    status, body = await get(port, "shop.test", "/")
    if status != 200:
        raise ValueError(f"status {status}")
    return str(body.get("name"))


async def _tcp(port: int) -> str:
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"whoami\n")
            await writer.drain()
            data = await reader.readline()
        finally:
            writer.close()
    return str(json.loads(data)["name"])


async def _swaps(stack: Stack, load: Load, write: Callable[[int], None],
                 ports: dict[str, int], order: tuple[str, ...]) -> None:
    task = asyncio.create_task(load.run(), name="load")
    try:
        await load.answered_by(order[0])
        for name in order[1:]:
            generation = stack.state.generation
            write(ports[name])
            await stack.applied(generation + 1)
            await load.answered_by(name)
    finally:
        load.stop.set()
        await task


async def test_http_pool_swapped_wholesale_under_load_drops_nothing(engine_stack: Stack) -> None:
    ports = {name: await engine_stack.start_echo(name) for name in ("old", "new")}

    def write(port: int) -> None:
        engine_stack.write("web.yaml", service("web", 80, port) + "---\n"
                    + endpoints("web", {"TCP": port}))

    write(ports["old"])
    engine_stack.write("ingress.yaml", SHOP_INGRESS)
    await engine_stack.start()
    load = Load(lambda: _http(engine_stack.http_port))
    await _swaps(engine_stack, load, write, ports, ("old", "new", "old", "new"))
    assert load.failures == []



async def test_a_new_member_failing_its_first_check_takes_no_request(engine_stack: Stack) -> None:
    """An HTTP pool checked on /healthz, swapped wholesale to a member that answers requests
    but fails its check: the departing member carries every request until the new one passes.
    Before, HAProxy counted a server it got at runtime up at once and sent it requests."""
    stack = engine_stack
    old = await stack.start_echo("old")
    health = EchoHealth(healthy=False)
    new = await stack.start_echo("new", health=health)

    def write(port: int) -> None:
        checked = service("web", 80, port, annotations={"podway.io/health-check-path": "/healthz"})
        stack.write("web.yaml", checked + "---\n" + endpoints("web", {"TCP": port}))

    write(old)
    stack.write("ingress.yaml", SHOP_INGRESS)
    await stack.start()
    load = Load(lambda: _http(stack.http_port))
    task = asyncio.create_task(load.run(), name="load")
    try:
        await load.answered_by("old")
        generation = stack.state.generation
        write(new)
        await stack.applied(generation + 1)
        answers = await _next(load, 30)
        assert set(answers) == {"old"}, Counter(answers)
        health.healthy = True
        await load.answered_by("new")
    finally:
        load.stop.set()
        await task
    assert load.failures == []

async def test_tcp_pool_swapped_wholesale_under_load_drops_nothing(engine_stack: Stack) -> None:
    stack = engine_stack
    ports = {name: await stack.start_echo(name, tcp=True) for name in ("old", "new")}
    ports["late"] = free_port()  # listens only once the pool already names it
    lb_port = free_port()

    def write(port: int) -> None:
        stack.write("l4.yaml", service("l4", lb_port, port, lb=True) + "---\n"
                    + endpoints("l4", {"TCP": port}))

    write(ports["old"])
    await stack.start()
    load = Load(lambda: _tcp(lb_port))
    await _swaps(stack, load, write, ports, ("old", "new", "old"))
    task = asyncio.create_task(load.run(), name="load")
    load.stop.clear()
    try:
        generation = stack.state.generation
        write(ports["late"])
        await stack.applied(generation + 1)
        answered = len(load.answers)
        async with load.answered:  # the departing member still answers after the change
            await load.answered.wait_for(lambda: len(load.answers) >= answered + 5)
        assert load.answers[-5:] == ["old"] * 5
        _, late = await echo_backend("late", tcp=True, port=ports["late"])
        stack.tasks.append(late)
        await load.answered_by("late")
    finally:
        load.stop.set()
        await task
    assert load.failures == []


def _write_l4(stack: Stack, lb_port: int, ports: dict[str, int], *names: str) -> None:
    """A LoadBalancer Service on ``lb_port`` with one EndpointSlice per named member."""
    stack.write("l4.yaml", service("l4", lb_port, ports[names[0]], lb=True) + "".join(
        "---\n" + endpoints("l4", {"TCP": ports[name]}, slice_name=f"l4-{name}")
        for name in names))


async def test_tcp_pool_changed_again_inside_the_hold_drops_nothing(engine_stack: Stack) -> None:
    """A swap to a member not listening yet, then, inside the hold, one more new member (a
    rollout's next pod turning ready): the departing member still carries the pool until a new
    one passes its check. Before, the second change ended the hold ("late-1 stays"), though
    Envoy had never seen late-1 pass: connections were reset until one did."""
    stack = engine_stack
    ports = {"old": await stack.start_echo("old", tcp=True)}
    ports |= {name: free_port() for name in ("late-1", "late-2")}
    lb_port = free_port()

    def write(*names: str) -> None:
        _write_l4(stack, lb_port, ports, *names)

    write("old")
    await stack.start()
    load = Load(lambda: _tcp(lb_port))
    task = asyncio.create_task(load.run(), name="load")
    try:
        await load.answered_by("old")
        for change in (("late-1",), ("late-1", "late-2")):
            generation = stack.state.generation
            write(*change)
            await stack.applied(generation + 1)
        answered = len(load.answers)
        async with load.answered:  # the departing member still answers after both changes
            await load.answered.wait_for(lambda: len(load.answers) >= answered + 5)
        assert load.answers[-5:] == ["old"] * 5
        for name in ("late-1", "late-2"):
            _, late = await echo_backend(name, tcp=True, port=ports[name])
            stack.tasks.append(late)
        async with asyncio.timeout(20), load.answered:
            await load.answered.wait_for(lambda: load.answers[-1].startswith("late-"))
    finally:
        load.stop.set()
        await task
    assert load.failures == []


async def test_a_held_member_that_closes_gets_nothing_while_a_new_one_is_healthy(
        engine_stack: Stack) -> None:
    """The held (departing) member gets traffic only while no new member is healthy. A swap
    to two new members, one not listening yet: once the other passed its check, half of
    priority 0 is healthy; then the departing member closes (its pod going). With Envoy's
    default overprovisioning factor (1.4) priority 1 still took 30 % of new connections,
    refused from then on, until Envoy's next check of the closed member."""
    stack = engine_stack
    old_port, old = await echo_backend("old", tcp=True)
    ports = {"old": old_port, "new": await stack.start_echo("new", tcp=True),
             "late": free_port()}
    lb_port = free_port()

    def write(*names: str) -> None:
        _write_l4(stack, lb_port, ports, *names)

    write("old")
    await stack.start()
    load = Load(lambda: _tcp(lb_port))
    task = asyncio.create_task(load.run(), name="load")
    try:
        await load.answered_by("old")
        generation = stack.state.generation
        write("new", "late")
        await stack.applied(generation + 1)
        await load.answered_by("new")  # the new member passed its first check
        for close in (False, True):  # the departing member alive, then closed
            if close:
                old.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await old
            before = len(load.failures)
            answers = await _next(load, 100)
            assert load.failures[before:] == []
            assert set(answers) == {"new"}, Counter(answers)
    finally:
        load.stop.set()
        await task
        old.cancel()


async def _next(load: Load, count: int) -> list[str]:
    """The next ``count`` answers (a failure answers "")."""
    answered = len(load.answers)
    async with asyncio.timeout(20), load.answered:
        await load.answered.wait_for(lambda: len(load.answers) >= answered + count)
    return load.answers[answered:]
