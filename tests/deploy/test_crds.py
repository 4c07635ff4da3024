"""The TrafficPolicy CRD (deploy/helm/podway/crds/): valid Kubernetes 1.33, its schema keeps
every field the model reads (a structural schema prunes what it does not list, so a missing
field would vanish silently at the API), and the reference's example fits it and parses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import jsonschema
import kubernetes_validate
import yaml
from pydantic import BaseModel

from podway.model.loader import parse_object
from podway.model.policy import TrafficPolicy, TrafficPolicySpec
from podway.sources.kube_kinds import PODWAY

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "helm" / "podway" / "crds" / "trafficpolicies.podway.io.yaml"


def crd() -> Any:
    return yaml.safe_load(CRD.read_text())


def schema() -> Any:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_crd_is_valid_kubernetes_and_names_what_the_source_watches() -> None:
    """Strictly valid; group, plural, scope and version are the ones the source watches."""
    obj = crd()
    kubernetes_validate.validate(obj, "1.33.0", strict=True)
    (spec,) = PODWAY
    assert obj["metadata"]["name"] == spec.crd_name
    assert obj["spec"]["names"]["kind"] == "TrafficPolicy"
    assert obj["spec"]["scope"] == "Namespaced"
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
    """Each field of TrafficPolicySpec (nested) is in the schema, so the API prunes none."""
    assert _missing(TrafficPolicySpec, schema()["properties"]["spec"], "spec") == []


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
