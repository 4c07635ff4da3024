"""Prometheus metrics of the agent.

Each agent owns its registry (tests and the lab run several agents in one process). The HTTP
surface is the shared one (``podway.readers.metrics.exposition``): ``/metrics`` (Prometheus text)
and ``/healthz`` (200 once the agent has restored its state from the annotations and its informers
are running, else 503).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.mappings = Gauge("podway_npl_mappings", "Node port mappings held by this agent.",
                              ["protocol"], registry=self.registry)
        self.sync_seconds = Histogram("podway_npl_sync_duration_seconds",
                                      "Time to reconcile one pod.", registry=self.registry)
        self.errors = Counter("podway_npl_errors", "Failed reconciles and kernel syncs.",
                              ["stage"], registry=self.registry)
        self.exhausted = Counter("podway_npl_ports_exhausted",
                                 "Times a pod could not get a node port: the range was full.",
                                 registry=self.registry)
        self.drift_repairs = Counter("podway_npl_rule_drift_repairs",
                                     "Resyncs that found the kernel rules changed and fixed them.",
                                     registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
