"""Object builders and the agent's settle wait shared by the agent tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.waiting import eventually

if TYPE_CHECKING:
    from podway.programs.agent.controller import Agent

NODE = "node-a"


def node_obj(name: str = NODE, *, internal: str = "198.18.0.1",
             external: str | None = None) -> dict[str, Any]:
    addresses = [{"type": "InternalIP", "address": internal}]
    if external:
        addresses.append({"type": "ExternalIP", "address": external})
    return {"metadata": {"name": name}, "status": {"addresses": addresses}}


def service_obj(name: str = "web", *, ns: str = "default", enabled: str | None = "true",
                selector: dict[str, str] | None = None, ports: list[dict[str, Any]] | None = None,
                type_: str = "ClusterIP") -> dict[str, Any]:
    annotations = {} if enabled is None else {"nodeportlocal.antrea.io/enabled": enabled}
    return {"metadata": {"name": name, "namespace": ns, "annotations": annotations},
            "spec": {"type": type_, "selector": {"app": "web"} if selector is None else selector,
                     "ports": ports or [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}}


def pod_obj(name: str, *, ip: str | None = "198.18.1.2", ns: str = "default",
            node: str = NODE, phase: str = "Running", labels: dict[str, str] | None = None,
            ports: list[dict[str, Any]] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status |= {"podIP": ip, "podIPs": [{"ip": ip}]}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {"app": "web"},
                         "annotations": annotations or {}},
            "spec": {"nodeName": node,
                     "containers": [{"name": "c", "image": "echo", "ports": ports or []}]},
            "status": status}




async def settled(agent: Agent, within: float = 5.0) -> None:
    """Wait until the agent's work queue is idle: nothing queued, in flight, or due to retry.

    Only meaningful once the events the test caused have reached the agent (objects put before
    the agent started are in its first list, so they have).
    """
    await eventually(agent.queue.idle, within=within)
