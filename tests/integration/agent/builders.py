"""Object builders and the agent's settle wait shared by the agent tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests import builders
from tests.waiting import eventually

if TYPE_CHECKING:
    from podway.programs.agent.controller import Agent

NODE = "node-a"


def node_obj(name: str = NODE, *, internal: str = "198.18.0.1",
             external: str | None = None) -> dict[str, Any]:
    return builders.node(name, internal, external=external, kind_fields=False)


def service_obj(name: str = "web", *, ns: str = "default", enabled: str | None = "true",
                selector: dict[str, str] | None = None, ports: list[dict[str, Any]] | None = None,
                type_: str = "ClusterIP") -> dict[str, Any]:
    """A Service of pods ``app: web`` (NodePortLocal ``enabled`` unless None), port 80 → 8080."""
    annotations = {} if enabled is None else {"nodeportlocal.antrea.io/enabled": enabled}
    return builders.service(
        name, type_=type_, namespace=ns, annotations=annotations,
        selector={"app": "web"} if selector is None else selector,
        ports=ports or [builders.service_port(80, 8080, name=None)], kind_fields=False)


def pod_obj(name: str, *, ip: str | None = "198.18.1.2", ns: str = "default",
            node: str = NODE, phase: str = "Running", labels: dict[str, str] | None = None,
            ports: list[dict[str, Any]] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod ``app: web`` on the agent's node, declaring ``ports`` (none by default)."""
    return builders.pod(name, ip or None, namespace=ns, node=node, phase=phase,
                        labels=labels or {"app": "web"}, annotations=annotations,
                        container_ports=ports or [], kind_fields=False)


async def settled(agent: Agent, within: float = 5.0) -> None:
    """Wait until the agent's work queue is idle: nothing queued, in flight, or due to retry.

    Only meaningful once the events the test caused have reached the agent (objects put before
    the agent started are in its first list, so they have).
    """
    await eventually(agent.queue.idle, within=within)
