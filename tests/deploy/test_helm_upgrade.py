"""``helm install`` then ``helm upgrade`` of the chart, each in its own process, through Helm's
own library (helm-sdkpy) against the API emulator, as ``podway lab upgrade`` runs them: Helm
keeps the release as Secrets (its default driver, sent in protobuf), so the second process
finds the first's release; a changed ``podAnnotations`` lands on the pod template of every
workload the chart runs, which is what rolls them."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from podway.kube.emulator import KubeEmulator
from podway.programs.lab.install import NAMESPACE, helm, values
from tests.deploy.helm import helm_python

WORKLOADS = [("deployments", "podway-controller"), ("deployments", "podway-engine-edge"),
             ("daemonsets", "podway-agent")]


@pytest.fixture
def python() -> Path:
    found = helm_python()
    if found is None:
        pytest.skip("no Python >= 3.12 with helm-sdkpy (PODWAY_HELM_PYTHON or .venv-helm)")
    return found


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[tuple[KubeEmulator, Path]]:
    async with KubeEmulator() as emulator:
        emulator.install_gateway_api()
        emulator.put("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": NAMESPACE}})
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "emu", "cluster": {"server": emulator.url}}],
            "users": [{"name": "u", "user": {"token": "test"}}],
            "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "u"}}],
            "current-context": "emu"}))
        yield emulator, kubeconfig


def release(emu: KubeEmulator, version: int) -> dict[str, Any]:
    """Helm's stored release (base64 of gzipped JSON in the Secret's ``release`` key)."""
    secret = emu.get("secrets", NAMESPACE, f"sh.helm.release.v1.podway.v{version}")
    assert secret is not None, f"release v{version} not stored"
    raw = base64.b64decode(base64.b64decode(secret["data"]["release"]))
    out: dict[str, Any] = json.loads(gzip.decompress(raw))
    return out


def annotations(emu: KubeEmulator) -> list[dict[str, str]]:
    found = [emu.get(plural, NAMESPACE, name) for plural, name in WORKLOADS]
    return [dict((w or {})["spec"]["template"]["metadata"].get("annotations") or {})
            for w in found]


async def test_an_upgrade_in_a_second_process_finds_the_release_and_changes_every_template(
        python: Path, emu: tuple[KubeEmulator, Path]) -> None:
    api, kubeconfig = emu
    chosen = values("t1")
    # Each a process of its own, as the lab runs them (the emulator answers meanwhile).
    await asyncio.to_thread(helm, "install", kubeconfig, chosen, python=python)
    assert release(api, 1)["info"]["status"] == "deployed"
    assert annotations(api) == [{}, {}, {}]
    await asyncio.to_thread(helm, "upgrade", kubeconfig,
                            {**chosen, "podAnnotations": {"example.com/roll": "2"}},
                            python=python)
    assert release(api, 1)["info"]["status"] == "superseded"
    assert release(api, 2)["info"]["status"] == "deployed"
    assert annotations(api) == [{"example.com/roll": "2"}] * 3
