"""kubectl against the emulator: discovery, get, apply, label,
delete, CRD-served kinds. What the lab will rely on."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from podway.kube.emulator import KubeEmulator

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")

MANIFEST = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{port: 80}], selector: {app: web}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec: {parentRefs: [{name: edge}]}
"""


async def kubectl(emu: KubeEmulator, *args: str) -> str:
    result = await asyncio.to_thread(
        subprocess.run, ["kubectl", "--server", emu.url, *args], capture_output=True,
        text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


async def test_kubectl_round_trip(tmp_path: Path) -> None:
    """apply creates, re-apply is unchanged, label patches, get reads, delete removes."""
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    async with KubeEmulator() as emu:
        emu.install_crd("HTTPRoute")
        out = await kubectl(emu, "apply", "-f", str(manifest))
        assert "service/web created" in out
        assert "httproute.gateway.networking.k8s.io/r created" in out
        out = await kubectl(emu, "apply", "-f", str(manifest))
        assert "service/web unchanged" in out
        await kubectl(emu, "label", "-n", "shop", "svc", "web", "tier=front")
        service = emu.get("services", "shop", "web")
        assert service is not None
        assert service["metadata"]["labels"] == {"tier": "front"}
        out = await kubectl(emu, "get", "-n", "shop", "svc,httproutes", "-o", "name")
        assert out.split() == ["service/web", "httproute.gateway.networking.k8s.io/r"]
        await kubectl(emu, "delete", "-n", "shop", "httproute", "r")
        assert emu.get("httproutes", "shop", "r") is None
        assert "httproutes" in await kubectl(emu, "api-resources", "-o", "name")


async def test_kubectl_scale_sets_deployment_replicas() -> None:
    """``kubectl scale`` goes through deployments/scale and changes only spec.replicas."""
    async with KubeEmulator() as emu:
        emu.put("deployments", {"metadata": {"name": "web", "namespace": "shop"},
                                "spec": {"replicas": 1,
                                         "selector": {"matchLabels": {"app": "web"}}}},
                group="apps")
        out = await kubectl(emu, "scale", "-n", "shop", "deployment/web", "--replicas", "3")
        assert "scaled" in out
        scaled = emu.get("deployments", "shop", "web", group="apps")
        assert scaled is not None
        assert scaled["spec"] == {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}}
