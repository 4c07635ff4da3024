"""The API server's defaulting for the workload kinds, on writes through the API: the fields
kubectl and the controllers read back (``kubectl rollout status`` refuses a DaemonSet whose
``updateStrategy`` is not RollingUpdate, and an unset one is not). Pure, in place."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def apply(group_resource: tuple[str, str], obj: Obj) -> None:
    if group_resource[0] != "apps" or not isinstance(obj.get("spec"), dict):
        return
    spec: Obj = obj["spec"]
    kind = group_resource[1]
    if kind in ("deployments", "replicasets"):
        spec.setdefault("replicas", 1)
    if kind == "deployments":
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxSurge", "25%")
            rolling.setdefault("maxUnavailable", "25%")
        spec.setdefault("progressDeadlineSeconds", 600)
    if kind == "daemonsets":
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", 1)
            rolling.setdefault("maxSurge", 0)
    if kind in ("deployments", "daemonsets"):
        spec.setdefault("revisionHistoryLimit", 10)
