"""Fixtures for the controller tests: an emulator and a bed, always torn down."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator

from .bed import Bed, options


@pytest.fixture
async def bed() -> AsyncIterator[Bed]:
    async with KubeEmulator() as emu:
        api = client.ApiClient(client.Configuration(host=emu.url))
        made = Bed(emu=emu, api=api, translate=options())
        try:
            yield made
        finally:
            await made.close()
            await api.close()
