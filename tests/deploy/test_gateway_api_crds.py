"""The Gateway API CRDs shipped in deploy/crds/gateway-api (one pinned release, both channels):
each is the release's own (bundle version, channel), every kind Podway reads has one in each
channel, the Helm chart and deploy/kubernetes install them from those very files, and
GatewayClass.status.supportedFeatures names the same release."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from podway.kube.gateway_api import KINDS
from podway.translate.gateway.status import GATEWAY_API_VERSION
from tests.deploy.helm import render

ROOT = Path(__file__).resolve().parents[2]
PINNED = ROOT / "deploy" / "crds" / "gateway-api" / GATEWAY_API_VERSION


def crds(channel: str) -> dict[str, Any]:
    out = {}
    for path in sorted((PINNED / channel).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                out[doc["spec"]["names"]["kind"]] = doc
    return out


def test_both_channels_of_the_pinned_release_cover_every_kind_podway_reads() -> None:
    """Standard and experimental channel files of GATEWAY_API_VERSION, each annotated with its
    release and channel; every kind Podway reads but BackendLBPolicy (gone upstream) is in
    both, served at some version; the experimental channel is a superset."""
    for channel in ("standard", "experimental"):
        found = crds(channel)
        for crd in found.values():
            notes = crd["metadata"]["annotations"]
            assert notes["gateway.networking.k8s.io/bundle-version"] == GATEWAY_API_VERSION
            assert notes["gateway.networking.k8s.io/channel"] == channel
            assert any(v["served"] for v in crd["spec"]["versions"])
        assert set(KINDS) - {"BackendLBPolicy"} <= set(found), channel
    assert set(crds("standard")) < set(crds("experimental"))
    for channel in ("standard", "experimental"):  # kustomize lists every file of the folder
        listed = yaml.safe_load((PINNED / channel / "kustomization.yaml").read_text())
        files = sorted(p.name for p in (PINNED / channel).glob("*.yaml")
                       if p.name != "kustomization.yaml")
        assert sorted(listed["resources"]) == files


def test_helm_chart_installs_the_pinned_files_behind_a_value() -> None:
    """The chart's gateway-api/ is the pinned release folder (a link, so the chart cannot
    drift from it); the template reads it by channel; off by default."""
    chart = ROOT / "deploy" / "helm" / "podway"
    assert (chart / "gateway-api").resolve() == PINNED.resolve()
    template = (chart / "templates" / "gateway-api-crds.yaml").read_text()
    assert 'printf "gateway-api/%s/*.yaml"' in template
    assert '"helm.sh/resource-policy" "keep"' in template
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert values["gatewayAPI"]["crds"] == ""


def test_deploy_kubernetes_kustomization_adds_the_standard_channel() -> None:
    """kubectl kustomize deploy/kubernetes renders podway.yaml plus the standard channel."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is needed to render the kustomization"
    done = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy" / "kubernetes")],
                          capture_output=True, text=True, check=True, timeout=120)
    objects = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = {o["spec"]["names"]["kind"] for o in objects
             if o["kind"] == "CustomResourceDefinition"}
    assert kinds == set(crds("standard"))
    plain = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "podway.yaml")
                                           .read_text()) if d]
    assert len(objects) == len(plain) + len(kinds) + 2  # + the upgrade guard policy, binding


@pytest.mark.parametrize("channel", ["standard", "experimental"])
async def test_helm_installs_every_crd_of_the_channel_unchanged_and_valid(helm: Any,
                                                                        channel: str) -> None:
    """``gatewayAPI.crds: <channel>`` on a cluster without the Gateway API: Helm installs
    exactly the channel's CRDs of deploy/crds (not its kustomization nor its upgrade guard),
    each equal to the pinned file but for the keep annotation, and valid Kubernetes 1.33 (the
    template once read kustomization.yaml as a CRD and failed)."""
    lint, objects = await render(helm, {"gatewayAPI": {"crds": channel},
                                        "gatewayClass": {"create": False}}, gateway_api=False)
    assert lint["Errors"] is None
    installed = {o["spec"]["names"]["kind"]: o for o in objects
                 if o["kind"] == "CustomResourceDefinition"}
    pinned = crds(channel)
    assert set(installed) == set(pinned)
    for kind, crd in installed.items():
        notes = crd["metadata"]["annotations"]
        assert notes.pop("helm.sh/resource-policy") == "keep"
        assert crd == pinned[kind], kind
        kubernetes_validate.validate(crd, "1.33.0", strict=True)
    assert not any(o["kind"] == "ValidatingAdmissionPolicy"
                   and o["metadata"]["name"].startswith("safe-upgrades") for o in objects)


async def test_helm_refuses_an_unknown_channel(helm: Any) -> None:
    with pytest.raises(AssertionError, match="is not standard, experimental or empty"):
        await render(helm, {"gatewayAPI": {"crds": "beta"}, "gatewayClass": {"create": False}},
                     gateway_api=False)
