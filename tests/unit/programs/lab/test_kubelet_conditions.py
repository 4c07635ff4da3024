"""The lab kubelet's pod conditions (issue 29.2): readiness gates hold Ready back, and the
conditions other writers set (the controller's ``podway.io/lb-ready``) are never dropped."""

from __future__ import annotations

from typing import Any

from podway.programs.lab.podstatus import pod_conditions

GATE = "podway.io/lb-ready"


def pod(gate_status: str | None, *, gated: bool = True) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "False", "lastTransitionTime": "t0"},
                  {"type": "example.com/other", "status": "True"}]
    if gate_status is not None:
        conditions.append({"type": GATE, "status": gate_status, "reason": "Engines"})
    return {"spec": {"readinessGates": [{"conditionType": GATE}] if gated else []},
            "status": {"conditions": conditions}}


def by_type(conditions: list[dict[str, Any]]) -> dict[str, str]:
    return {str(c["type"]): str(c["status"]) for c in conditions}


def test_ready_waits_for_every_gate_and_keeps_other_writers_conditions() -> None:
    unset = by_type(pod_conditions(pod(None), containers_ready=True))
    assert unset["ContainersReady"] == "True"
    assert unset["Ready"] == "False"
    assert unset["example.com/other"] == "True"
    held = pod_conditions(pod("False"), containers_ready=True)
    assert by_type(held)["Ready"] == "False"
    assert next(c for c in held if c["type"] == "Ready")["reason"] == "ReadinessGatesNotReady"
    assert next(c for c in held if c["type"] == GATE) == {"type": GATE, "status": "False",
                                                          "reason": "Engines"}
    opened = by_type(pod_conditions(pod("True"), containers_ready=True))
    assert opened["Ready"] == "True"
    assert opened[GATE] == "True"
    # A gate that passes does not make a pod whose containers are not ready Ready.
    assert by_type(pod_conditions(pod("True"), containers_ready=False))["Ready"] == "False"


def test_without_gates_ready_follows_the_containers_and_times_move_only_on_change() -> None:
    first = pod_conditions(pod(None, gated=False), containers_ready=False)
    ready = next(c for c in first if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["lastTransitionTime"] == "t0"
    now_ready = pod_conditions(pod(None, gated=False), containers_ready=True)
    assert by_type(now_ready)["Ready"] == "True"
    assert next(c for c in now_ready if c["type"] == "Ready")["lastTransitionTime"] != "t0"
