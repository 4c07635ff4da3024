"""The controller's OIDC session key: made once in its Secret, the same for every replica and
restart; a Secret holding no usable key leaves OIDC refused (None), never a weak key."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest

from podway.kube.emulator import KubeEmulator
from podway.programs.controller.oidc_key import session_key

from .test_engine_certs import as_token


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        yield emulator


async def test_the_key_is_made_once_and_shared(emu: KubeEmulator) -> None:
    emu.add_user("controller", "system:serviceaccount:podway-system:podway-controller")
    async with as_token(emu, "controller") as api:
        first = await session_key(api, "podway-system", "podway-oidc-key")
        second = await session_key(api, "podway-system", "podway-oidc-key")
    assert first is not None
    assert len(first) == 32
    assert second == first
    stored = emu.get("secrets", "podway-system", "podway-oidc-key")
    assert stored is not None
    assert base64.b64decode(stored["data"]["key"]) == first


async def test_a_secret_without_a_usable_key_refuses(emu: KubeEmulator) -> None:
    emu.put("secrets", {"metadata": {"name": "podway-oidc-key", "namespace": "podway-system"},
                        "data": {"key": base64.b64encode(b"short").decode()}})
    emu.add_user("controller", "system:serviceaccount:podway-system:podway-controller")
    async with as_token(emu, "controller") as api:
        assert await session_key(api, "podway-system", "podway-oidc-key") is None
