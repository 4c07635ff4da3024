"""``podway echo``: the workload of demos, tests and the lab (like Kubernetes' agnhost).

HTTP/1.1 and h2c (prior knowledge or ``Upgrade: h2c``) answer JSON describing the request as the
server saw it; ``/healthz`` is the readiness endpoint: 200, or 503 after ``POST /healthz/fail``
until ``POST /healthz/ok`` (how tests and demos make one backend unhealthy while it keeps
serving everything else). TCP and UDP modes echo bytes back, except
``whoami`` which answers the same identity JSON, so a client can tell which backend it reached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """Who this echo server is; filled from flags, else the downward-API style environment."""

    name: str = ""
    pod: str = ""
    namespace: str = ""
    node: str = ""

    @classmethod
    def from_env(cls, *, name: str = "", pod: str = "", namespace: str = "", node: str = ""
                 ) -> Identity:
        pod = pod or os.environ.get("POD_NAME", "")
        return cls(name=name or pod or os.environ.get("HOSTNAME", "echo"), pod=pod,
                   namespace=namespace or os.environ.get("POD_NAMESPACE", ""),
                   node=node or os.environ.get("NODE_NAME", ""))

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "pod": self.pod, "namespace": self.namespace,
                "node": self.node}


@dataclass(slots=True)
class Health:
    """What ``/healthz`` answers, shared by every connection of one server (mutable on
    purpose: ``POST /healthz/fail`` and ``/healthz/ok`` flip it). ``checks`` counts the
    ``/healthz`` requests answered, ``failed`` those answered 503."""

    healthy: bool = True
    checks: int = 0
    failed: int = 0
