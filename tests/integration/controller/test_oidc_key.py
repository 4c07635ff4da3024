"""The controller's OIDC session key: made once in its Secret, the same for every replica and
restart; a Secret holding no usable key leaves OIDC refused (None), never a weak key."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest
import yaml

from podway.kube.emulator import KubeEmulator
from podway.programs.controller.oidc_key import session_key
from tests.waiting import eventually

from .bed import Bed, lb_service
from .test_engine_certs import as_token
from .test_status import TRAFFIC_POLICY_CRD, policy_accepted, traffic_policy


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


def resolved(bed: Bed, name: str) -> tuple[str, str] | None:
    obj = bed.emu.get("trafficpolicies", "default", name, group="podway.io")
    ancestors = ((obj or {}).get("status") or {}).get("ancestors") or []
    found = [c for a in ancestors for c in a["conditions"] if c["type"] == "ResolvedRefs"]
    return (found[0]["status"], found[0]["reason"]) if found else None


async def test_the_controller_signs_oidc_sessions_with_its_secrets_key(bed: Bed) -> None:
    """A controller with --oidc-key-secret makes the Secret and accepts an OIDC policy; one
    without a key refuses it (Accepted=False naming the missing key), never serves it open.
    The client Secret is Opaque, as users write it: the controller sees it (ResolvedRefs)."""
    bed.emu.put("services", lb_service("web", 8081))
    bed.emu.put("services", lb_service("idp", 8443))
    bed.emu.put("secrets", {"metadata": {"name": "client", "namespace": "default"},
                            "data": {"client-secret": base64.b64encode(b"hush").decode()}})
    bed.emu.put("customresourcedefinitions", yaml.safe_load(TRAFFIC_POLICY_CRD.read_text()))
    oidc = {"provider": {"issuer": "https://idp.test", "backendRef": {"name": "idp",
                                                                      "port": 8443},
                         "authorizationEndpoint": "https://idp.test/authorize",
                         "tokenEndpoint": "https://idp.test/token"},
            "clientID": "shop", "clientSecret": {"name": "client"}}
    bed.emu.put("trafficpolicies", traffic_policy("web", "web", security={"oidc": oidc}),
                group="podway.io")
    await bed.start(oidc_key_secret=("podway-system", "podway-oidc-key"))
    await eventually(lambda: (policy_accepted(bed, "web") or {}).get("status") == "True")
    await eventually(lambda: resolved(bed, "web") == ("True", "ResolvedRefs"))
    stored = bed.emu.get("secrets", "podway-system", "podway-oidc-key")
    assert stored is not None
    assert len(base64.b64decode(stored["data"]["key"])) == 32
    await bed.stop_controller()
    await bed.start()  # no --oidc-key-secret: no key
    await eventually(lambda: (policy_accepted(bed, "web") or {}).get("status") == "False")
    refused = policy_accepted(bed, "web")
    assert refused is not None
    assert "no OIDC session key" in refused["message"]
