"""Runs agents in-process against the API emulator for the agent tests."""

from __future__ import annotations

import asyncio
import contextlib

from fakes import FakeOpener, FakeRules
from kubernetes_asyncio import client

from builders import NODE
from podway.base.backoff import Backoff
from podway.programs.agent.controller import Agent, AgentSettings
from podway.programs.agent.ports import PortRange, SocketOpener
from podway.programs.agent.rules.base import Rules


class StartAgent:
    """Starts agents against the emulator, each in a kept task; ``stop`` ends one; the fixture
    stops the rest at teardown."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.running: dict[int, asyncio.Task[None]] = {}

    async def __call__(self, *, rules: Rules | None = None, opener: SocketOpener | None = None,
                       port_range: str = "61000-61009", resync: float = 30.0,
                       node_ip: str | None = None, npl_key: bytes | None = None) -> Agent:
        settings = AgentSettings(node_name=NODE, port_range=PortRange.parse(port_range),
                                 node_ip=node_ip, resync_seconds=resync, watch_timeout=2,
                                 backoff=Backoff(base=0.02), npl_key=npl_key)
        agent = Agent(api=self.api, rules=rules or FakeRules(), opener=opener or FakeOpener(),
                      settings=settings)
        task = asyncio.create_task(agent.run(), name="test-agent")
        self.running[id(agent)] = task
        waiter = asyncio.ensure_future(agent.restored.wait())
        done, _ = await asyncio.wait({waiter, task}, timeout=10,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()
        assert waiter in done, "agent did not restore in time"
        return agent

    async def stop(self, agent: Agent) -> None:
        task = self.running.pop(id(agent), None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def stop_all(self) -> None:
        for task in self.running.values():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.running.clear()
