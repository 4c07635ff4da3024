"""Podway's CRDs (deploy/helm/podway/crds/): valid Kubernetes 1.33, naming what the source
watches, their schemas keeping every field the models read (a structural schema prunes what it
does not list, so a missing field would vanish silently at the API), and the reference's
TrafficPolicy example fits its CRD and parses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from podway.model.classconfig import GatewayClassConfigSpec
from podway.model.loader import parse_object
from podway.model.policy import TrafficPolicy, TrafficPolicySpec
from podway.model.vips import VIPPoolSpec
from podway.sources.kube_kinds import PODWAY, KindSpec

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "helm" / "podway" / "crds" / "trafficpolicies.podway.io.yaml"


def crd() -> Any:
    return yaml.safe_load(CRD.read_text())


def schema() -> Any:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("spec", PODWAY, ids=lambda s: s.kind)
def test_crd_is_valid_kubernetes_and_names_what_the_source_watches(spec: KindSpec) -> None:
    """Strictly valid; group, plural, scope and version are the ones the source watches."""
    obj = yaml.safe_load((CRD.parent / f"{spec.crd_name}.yaml").read_text())
    kubernetes_validate.validate(obj, "1.33.0", strict=True)
    assert obj["metadata"]["name"] == spec.crd_name
    assert obj["spec"]["names"]["kind"] == spec.kind
    assert obj["spec"]["scope"] == ("Namespaced" if spec.namespaced else "Cluster")
    assert [v["name"] for v in obj["spec"]["versions"]] == [spec.version]
    assert "status" in obj["spec"]["versions"][0]["subresources"]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model inside ``X | None``, ``tuple[X, ...]`` and the like (None: a scalar)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _missing(model: type[BaseModel], node: Any, path: str) -> list[str]:
    if node.get("type") == "array":
        node = node["items"]
    props = node.get("properties", {})
    out = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key not in props:
            out.append(f"{path}.{key}")
            continue
        sub = _model_of(info.annotation)
        if sub is not None:
            out += _missing(sub, props[key], f"{path}.{key}")
    return out


def test_schema_keeps_every_field_the_model_reads() -> None:
    """Each field of TrafficPolicySpec, VIPPoolSpec and GatewayClassConfigSpec (nested) is in
    its schema, so the API prunes none."""
    assert _missing(TrafficPolicySpec, schema()["properties"]["spec"], "spec") == []
    pools = yaml.safe_load((CRD.parent / "vippools.podway.io.yaml").read_text())
    pool_schema = pools["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _missing(VIPPoolSpec, pool_schema["properties"]["spec"], "spec") == []
    configs = yaml.safe_load((CRD.parent / "gatewayclassconfigs.podway.io.yaml").read_text())
    config_schema = configs["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _missing(GatewayClassConfigSpec, config_schema["properties"]["spec"], "spec") == []


def test_reference_example_fits_the_schema_and_parses() -> None:
    """The TrafficPolicy example in docs/reference.md is valid for the CRD and the model."""
    text = (ROOT / "docs" / "reference.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S)
                 if "kind: TrafficPolicy" in b)
    example = yaml.safe_load(block)
    jsonschema.validate(example, schema())
    obj, error = parse_object(example, source="reference.md", document=0)
    assert error is None
    assert isinstance(obj, TrafficPolicy)
    broken = {**example, "spec": {**example["spec"], "targetRefs": "web"}}
    try:
        jsonschema.validate(broken, schema())
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("a targetRefs string was accepted")


def test_reference_class_defaults_example_fits_the_schema_and_is_accepted() -> None:
    """The GatewayClassConfig example in docs/reference.md is valid for its CRD, and its
    defaults are valid class parameters (not InvalidParameters)."""
    from podway.model.classconfig import GatewayClassConfig
    from podway.model.gateway import GatewayClass
    from podway.model.snapshot import Snapshot
    from podway.translate.gateway.parameters import ClassParameters, class_parameters

    text = (ROOT / "docs" / "reference.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S)
                 if "kind: GatewayClassConfig" in b)
    example = yaml.safe_load(block)
    configs = yaml.safe_load((CRD.parent / "gatewayclassconfigs.podway.io.yaml").read_text())
    jsonschema.validate(example, configs["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    obj, error = parse_object(example, source="reference.md", document=0)
    assert error is None
    assert isinstance(obj, GatewayClassConfig)
    cls, error = parse_object({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "edge"},
        "spec": {"controllerName": "podway.io/gateway-controller",
                 "parametersRef": {"group": "podway.io", "kind": "GatewayClassConfig",
                                   "name": obj.metadata.name}}}, source="test", document=0)
    assert error is None
    assert isinstance(cls, GatewayClass)
    params = class_parameters(cls, Snapshot.of_objects([obj, cls]))
    assert isinstance(params, ClassParameters), params
    assert params.defaults is not None
    assert params.defaults.timeouts is not None
