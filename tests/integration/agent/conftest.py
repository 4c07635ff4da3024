"""Fixtures for agent tests: the API emulator, a real kubernetes-asyncio client, agent runner."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from harness import StartAgent
from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator


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


@pytest.fixture
async def start_agent(api: client.ApiClient) -> AsyncIterator[StartAgent]:
    runner = StartAgent(api)
    try:
        yield runner
    finally:
        await runner.stop_all()
