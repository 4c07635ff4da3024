"""Render the Helm chart with Helm itself: helm-sdkpy (Helm's Go library) in a helper
virtualenv of Python >= 3.12 (``./dev`` creates ``.venv-helm`` when pyenv or the system has
such an interpreter), installing into the Kubernetes API emulator with Helm's in-memory release
driver. The emulator serves every kind the chart uses natively, so Helm's mapping, ordering and
creation all run for real."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from podway.kube.emulator import KubeEmulator

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "podway"
HELPER = Path(__file__).with_name("helm_render.py")
NAMESPACE = "podway-system"

def helm_python() -> Path | None:
    """The helper interpreter with helm-sdkpy, or None."""
    for candidate in (os.environ.get("PODWAY_HELM_PYTHON"), str(ROOT / ".venv-helm/bin/python")):
        if candidate and Path(candidate).exists():
            done = subprocess.run([candidate, "-c", "import helm_sdkpy"], capture_output=True,
                                  check=False)
            if done.returncode == 0:
                return Path(candidate)
    return None


async def render(python: Path, values: dict[str, Any], *, existing: tuple[Any, ...] = (),
                 gateway_api: bool = True) -> tuple[dict[str, Any], list[Any]]:
    """Helm's lint result and the rendered objects for ``values``; ``existing`` objects are in
    the cluster before (what the chart's ``lookup`` finds); ``gateway_api``: the Gateway API
    CRDs are installed before (False: a cluster without them, for the chart to install)."""
    async with KubeEmulator() as emu:
        if gateway_api:
            emu.install_gateway_api()
        for obj in existing:
            emu.put(f"{obj['kind'].lower()}s", obj)
        kubeconfig = Path(os.environ.get("TMPDIR", "/tmp")) / f"podway-helm-{os.getpid()}.yaml"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "emu", "cluster": {"server": emu.url}}],
            "users": [{"name": "u", "user": {"token": "test"}}],
            "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "u"}}],
            "current-context": "emu"}))
        try:
            proc = await asyncio.create_subprocess_exec(
                str(python), str(HELPER), str(CHART), str(kubeconfig), NAMESPACE,
                json.dumps(values), env={**os.environ, "HELM_DRIVER": "memory"},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
        finally:
            kubeconfig.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise AssertionError(f"helm failed: {err.decode()[-2000:]}")
        result = json.loads(out)
        return result["lint"], [d for d in yaml.load_all(result["manifest"], Loader=_Unique) if d]


class _Unique(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping: the API server and kubectl
    keep the last one silently (a second ``serviceAccountName`` once replaced the engine's)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        twice = {k for k in keys if keys.count(k) > 1}
        if twice:
            raise AssertionError(f"the chart renders {sorted(map(str, twice))} twice in one "
                                 f"mapping (line {node.start_mark.line + 1})")
        return super().construct_mapping(node, deep=deep)

