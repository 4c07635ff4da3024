"""Issue 29: a PodDisruptionBudget per engine group (the controller has had one): a node drain
evicts at most one engine of a group at once by default, a group may set its own budget
(``maxUnavailable`` or ``minAvailable``, 0 and a percentage included) or none, and
``engineDisruptionBudget.enabled: false`` turns them all off. Rendered by Helm itself,
every object validated against the Kubernetes schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.deploy.helm import render
from tests.deploy.test_manifests import validate

EDGE = {"name": "edge", "engine": "envoy", "replicas": 2,
        "nodeSelector": {"podway.io/edge": "true"}, "tlsSecret": "t", "concurrency": 2,
        "onlyItsObjects": False, "secondChance": {"pair": [], "ports": [80]}}


def budgets(objects: list[Any]) -> dict[str, Any]:
    return {o["metadata"]["name"]: o["spec"] for o in objects
            if o["kind"] == "PodDisruptionBudget" and "engine" in o["metadata"]["name"]}


def pod_labels(objects: list[Any], name: str) -> dict[str, str]:
    deployment = next(o for o in objects
                      if o["kind"] == "Deployment" and o["metadata"]["name"] == name)
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


async def test_each_engine_group_has_a_budget_selecting_only_its_own_pods(helm: Path) -> None:
    groups = [EDGE, {**EDGE, "name": "inner", "engine": "haproxy", "replicas": 3}]
    _, objects = await render(helm, {"engineGroups": groups})
    validate(objects)
    found = budgets(objects)
    assert set(found) == {"podway-engine-edge", "podway-engine-inner"}
    for name, spec in found.items():
        assert spec["maxUnavailable"] == 1
        assert "minAvailable" not in spec
        selector = spec["selector"]["matchLabels"]
        labels = pod_labels(objects, name)
        assert selector.items() <= labels.items()  # it selects the group's pods
        other = pod_labels(objects, ({"podway-engine-edge", "podway-engine-inner"} - {name})
                           .pop())
        assert not selector.items() <= other.items()  # and not the other group's


async def test_a_group_sets_its_own_budget_or_none(helm: Path) -> None:
    groups = [{**EDGE, "disruptionBudget": {"minAvailable": "50%"}},
              {**EDGE, "name": "zero", "disruptionBudget": {"maxUnavailable": 0}},
              {**EDGE, "name": "spare", "disruptionBudget": {"enabled": False}}]
    _, objects = await render(helm, {"engineGroups": groups})
    validate(objects)
    found = budgets(objects)
    assert found["podway-engine-edge"]["minAvailable"] == "50%"
    assert "maxUnavailable" not in found["podway-engine-edge"]
    assert found["podway-engine-zero"]["maxUnavailable"] == 0
    assert "podway-engine-spare" not in found


async def test_budgets_turn_off_for_every_group(helm: Path) -> None:
    _, objects = await render(helm, {"engineDisruptionBudget": {"enabled": False},
                                     "engineGroups": [EDGE]})
    validate(objects)
    assert budgets(objects) == {}
    _, objects = await render(helm, {"engineDisruptionBudget": {"enabled": False},
                                     "engineGroups": [{**EDGE, "disruptionBudget": {
                                         "enabled": True}}]})
    assert budgets(objects)["podway-engine-edge"]["maxUnavailable"] == 1
