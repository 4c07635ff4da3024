"""What the controller keeps of a Pod: Podway's readiness gate and its condition, and only for
pods that carry the gate (other pods' condition flaps must stay invisible)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from podway.model.core import LB_READY, Pod
from podway.sources.kube_kinds import slim_pod


def raw(*, gated: bool, ready: str = "True") -> dict[str, Any]:
    gates = [{"conditionType": "other.io/gate"}] + (
        [{"conditionType": LB_READY}] if gated else [])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": "n1", "readinessGates": gates, "containers": []},
            "status": {"phase": "Running", "podIP": "10.0.0.7", "conditions": [
                {"type": "Ready", "status": ready},
                {"type": LB_READY, "status": "False", "reason": "WaitingForEngines",
                 "lastTransitionTime": "2026-12-01T00:00:00Z"}]}}


def test_a_gated_pod_keeps_its_gate_and_only_podway_s_condition() -> None:
    pod = Pod.model_validate(slim_pod(raw(gated=True)))
    assert pod.gated(LB_READY)
    assert [g.condition_type for g in pod.spec.readiness_gates] == [LB_READY]
    condition = pod.condition(LB_READY)
    assert condition is not None
    assert (condition.status, condition.reason, condition.last_transition_time) == (
        "False", "WaitingForEngines", "2026-12-01T00:00:00Z")
    assert [c.type for c in pod.status.conditions] == [LB_READY]


def test_an_ungated_pod_keeps_no_gate_and_no_condition() -> None:
    """Its Ready flapping yields the same slim pod: no update for the pipeline."""
    before = slim_pod(raw(gated=False, ready="True"))
    after = slim_pod(raw(gated=False, ready="False"))
    assert before == after
    pod = Pod.model_validate(before)
    assert not pod.gated(LB_READY)
    assert pod.status.conditions == ()


def test_slimming_does_not_touch_its_input() -> None:
    original = raw(gated=True)
    kept = copy.deepcopy(original)
    slim_pod(original)
    assert original == kept


def test_the_pod_model_reads_only_podway_s_gate_and_condition_leniently() -> None:
    """A manifest's other conditions and malformed gates (a bare YAML ``True``, an unquoted
    timestamp, a number as reason) never make a pod invalid; Podway's own condition is read as
    the API would write it."""
    pod = Pod.model_validate(yaml.safe_load(f"""
apiVersion: v1
kind: Pod
metadata: {{name: web-1, namespace: default}}
spec:
  readinessGates: [{{conditionType: {LB_READY}}}, {{conditionType: 7}}, junk]
status:
  conditions:
  - {{type: Ready, status: True, lastTransitionTime: 2026-01-01T00:00:00Z, reason: 5}}
  - {{type: {LB_READY}, status: False, lastTransitionTime: 2026-12-01T17:00:00Z}}
"""))
    assert pod.gated(LB_READY)
    assert len(pod.spec.readiness_gates) == 1
    condition = pod.condition(LB_READY)
    assert condition is not None
    assert (condition.status, condition.last_transition_time) == ("False",
                                                                  "2026-12-01T17:00:00Z")
    assert [c.type for c in pod.status.conditions] == [LB_READY]
