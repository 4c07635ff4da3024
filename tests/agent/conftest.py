"""Fixtures for agent tests: the API emulator, a real kubernetes-asyncio client, agent runner."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from builders import NODE
from fakes import FakeOpener, FakeRules
from kubeemu import KubeEmulator
from kubernetes_asyncio import client

from podway.agent.controller import Agent, AgentSettings
from podway.agent.ports import PortRange, SocketOpener
from podway.agent.rules.base import Rules
from podway.agent.workqueue import Backoff


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    emulator = KubeEmulator()
    await emulator.start()
    try:
        yield emulator
    finally:
        await emulator.stop()


@pytest.fixture
async def api(emu: KubeEmulator) -> AsyncIterator[client.ApiClient]:
    config = client.Configuration(host=emu.url)
    async with client.ApiClient(configuration=config) as api_client:
        yield api_client


StartAgent = Callable[..., Awaitable[Agent]]


@pytest.fixture
async def start_agent(api: client.ApiClient) -> AsyncIterator[StartAgent]:
    """Start agents (each in a kept task); stops them all at teardown."""
    running: list[tuple[Agent, asyncio.Task[None]]] = []

    async def start(*, rules: Rules | None = None, opener: SocketOpener | None = None,
                    port_range: str = "61000-61009", resync: float = 30.0,
                    node_ip: str | None = None) -> Agent:
        agent = Agent(api=api, rules=rules or FakeRules(), opener=opener or FakeOpener(),
                      settings=AgentSettings(node_name=NODE, port_range=PortRange.parse(port_range),
                                             node_ip=node_ip, resync_seconds=resync,
                                             watch_timeout=2, backoff=Backoff(base=0.02)))
        task = asyncio.create_task(agent.run(), name="test-agent")
        running.append((agent, task))
        waiter = asyncio.ensure_future(agent.restored.wait())
        done, _ = await asyncio.wait({waiter, task}, timeout=10,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()
        assert waiter in done, "agent did not restore in time"
        return agent

    async def stop(task: asyncio.Task[None]) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    start.stop = stop  # type: ignore[attr-defined]
    try:
        yield start
    finally:
        for _, task in running:
            await stop(task)
