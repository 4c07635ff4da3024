"""Kubernetes Event bodies the agent posts (pure builders; the controller sends them)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from podway.model.core import Pod
from podway.programs.agent.ports import PortRange

EXHAUSTED_REASON = "NodePortLocalPortsExhausted"


def ports_exhausted(pod: Pod, *, node_name: str, port_range: PortRange,
                    now: datetime | None = None) -> dict[str, Any]:
    """A Warning event on ``pod``: no free node port in the range on this node."""
    stamp = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    return {
        "metadata": {"generateName": f"{pod.metadata.name}."},
        "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name,
                           "namespace": pod.metadata.namespace, "uid": pod.metadata.uid},
        "reason": EXHAUSTED_REASON, "type": "Warning",
        "message": (f"no free node port in {port_range.start}-{port_range.end} "
                    f"on node {node_name}"),
        "source": {"component": "podway-agent", "host": node_name},
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
