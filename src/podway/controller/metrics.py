"""The controller's Prometheus metrics (served on ``--metrics-port`` with health and readiness).

xDS pushes and NACKs are counted by the xDS server itself (``podway_xds_pushes_total``,
``podway_xds_nacks_total``); everything the controller adds is here.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

OBJECTS = Gauge("podway_controller_objects", "Objects in the current snapshot", ["kind"])
TRANSLATE_SECONDS = Histogram(
    "podway_controller_translate_seconds", "Translate + build + cache time of one update",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))
UPDATES = Counter("podway_controller_updates_total", "Source updates applied")
STATUS_WRITES = Counter("podway_controller_status_writes_total",
                        "Status PATCHes sent, by kind and result", ["kind", "result"])
EVENTS = Counter("podway_controller_events_total", "Events written (created or counted up)",
                 ["type", "reason"])
QUEUE_DEPTH = Gauge("podway_controller_queue_depth",
                    "Object changes waiting to be coalesced into the next update")
WATCH_EVENTS = Counter("podway_controller_watch_events_total", "Watch events taken", ["kind"])
WATCH_RESTARTS = Gauge("podway_controller_watch_relists",
                       "Re-lists after the first (410 Gone, broken watches), all kinds")
PENDING_MEMBERS = Gauge("podway_controller_pending_members",
                        "Pods waiting for their NodePortLocal annotation")
