"""The lab's API holds Podway's own CRDs before ``podway lab up --install`` runs the chart,
whose ``crds/`` folder ships the same ones: Helm must take that as a cluster where they are
already installed (skipped), not fail the install."""

from __future__ import annotations

from typing import Any

import yaml

from podway.kube.emulator import KubeEmulator
from podway.programs.lab.controlplane import PODWAY_CRDS, install_podway_crds

from .helm import render


async def test_the_chart_installs_into_a_lab_that_already_holds_podways_crds(helm: Any) -> None:
    async with KubeEmulator() as emu:
        names = install_podway_crds(emu)
        existing = tuple(emu.get("customresourcedefinitions", "", name) for name in names)
    assert len(existing) == 5  # TrafficPolicy, GatewayClassConfig, VIPPool, VIPPeer and Adv.
    shipped = sorted(doc["metadata"]["name"] for p in PODWAY_CRDS.glob("*.yaml")
                     for doc in yaml.safe_load_all(p.read_text()) if doc)
    assert sorted(names) == shipped
    lint, objects = await render(helm, {}, existing=existing)
    assert lint["Errors"] is None
    assert any(o["kind"] == "Deployment" for o in objects)
