"""The controller's own Prometheus series, on a registry of their own (several controllers may
share one process, as in tests). ``/metrics`` serves it next to the process-wide registry (the
xDS server's series) and the pipeline's (``podway.readers.metrics.pipeline``: generations, stage
times, problems, IR objects); docs/observability.md lists every series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import generate_latest

from podway.model import Snapshot


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        self.objects = Gauge("podway_controller_objects",
                             "Objects in the current snapshot, by kind.", ["kind"], registry=reg)
        self.status_writes = Counter("podway_controller_status_writes",
                                     "Status PATCHes sent, by kind and result.",
                                     ["kind", "result"], registry=reg)
        self.status_repairs = Counter("podway_controller_status_repairs",
                                      "Statuses someone else changed that were written again.",
                                      registry=reg)
        self.events = Counter("podway_controller_events", "Events written (created or counted "
                              "up).", ["type", "reason"], registry=reg)
        self.queue_depth = Gauge("podway_controller_queue_depth",
                                 "Object changes waiting to be coalesced into the next update.",
                                 registry=reg)
        self.watch_events = Counter("podway_controller_watch_events",
                                    "Watch events taken, by kind.", ["kind"], registry=reg)
        self.relists = Gauge("podway_controller_watch_relists",
                             "Re-lists after the first (410 Gone, broken watches), all kinds.",
                             registry=reg)
        self.kinds_refused = Gauge("podway_controller_kinds_refused",
                                   "1 while the API refuses to list a kind (403, 404); what "
                                   "does not need it is served meanwhile.", ["kind"],
                                   registry=reg)
        self.pending_members = Gauge("podway_controller_pending_members",
                                     "Pods waiting for their NodePortLocal annotation.",
                                     registry=reg)
        self.gated_pods = Gauge("podway_controller_gated_pods",
                                "Pods with the readiness gate podway.io/lb-ready, by the "
                                "verdict of the last pass.", ["verdict"], registry=reg)
        self.engines = Gauge("podway_controller_engines",
                             "Engines this replica hears, by how: on its xDS and reporting "
                             "(both), on its xDS only (they block the readiness gate until they "
                             "report), reporting only (their xDS goes to another replica).",
                             ["via"], registry=reg)
        self.leader = Gauge("podway_controller_leader", "1 while this replica holds the "
                            "Lease and may write (always 1 without leader election).",
                            registry=reg)
        self.leader_transitions = Counter("podway_controller_leader_transitions",
                                          "Times this replica took or lost the Lease.",
                                          ["change"], registry=reg)
        self.fenced_writes = Counter("podway_controller_fenced_writes",
                                     "Writes dropped because this replica was not (or no "
                                     "longer) the leader, by writer.", ["writer"], registry=reg)

    def observe_snapshot(self, snapshot: Snapshot) -> None:
        for kind, objects in snapshot.objects.items():
            self.objects.labels(kind=kind).set(len(objects))

    def render(self) -> bytes:
        return generate_latest(self.registry)
