"""Kinds the API refuses to list, said three ways (issue 23: serve what can be served, report
what cannot).

The source settles a refused CRD kind (or the CRD list itself) instead of waiting for it
(``podway.sources.kube``); this turns what it reports (``KubeSource.unavailable``) into an error
in the log when a refusal starts or changes, the gauge ``podway_controller_kinds_refused{kind}``,
and, when the set changed, a Warning ``KindsRefused`` on each GatewayClass this controller owns.
A new leadership term says it again (``reset``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from podway.model import Snapshot
from podway.model.gateway import GatewayClass
from podway.programs.controller.events import Due
from podway.programs.controller.metrics import ControllerMetrics

log = logging.getLogger(__name__)


class RefusedKinds:
    def __init__(self, metrics: ControllerMetrics, *, controller_name: str) -> None:
        self._metrics = metrics
        self._controller = controller_name
        self._last: dict[str, str] = {}  # kind → why, as last reported

    def reset(self) -> None:
        """Report everything again (a new term: the events may not have been written)."""
        self._last = {}

    def due(self, now: Mapping[str, str], snapshot: Snapshot) -> list[Due]:
        """Log and count ``now`` (kind → why); the events to write when it changed."""
        if now == self._last:
            return []
        for kind in self._last.keys() - now.keys():
            self._metrics.kinds_refused.labels(kind=kind).set(0)
            log.info("listing %s works again", kind)
        for kind, why in now.items():
            self._metrics.kinds_refused.labels(kind=kind).set(1)
            if self._last.get(kind) != why:
                log.error("cannot list %s (%s): its objects are not served until it can; "
                          "everything else is", kind, why)
        self._last = dict(now)
        if not now:
            return []
        message = ("the controller cannot list " + "; ".join(
            f"{kind} ({why})" for kind, why in now.items())
            + ": what needs them is not served; check the controller's ClusterRole")
        return [Due(ref=cls.ref, type="Warning", reason="KindsRefused", message=message[:1000])
                for cls in snapshot.kind(GatewayClass).values()
                if cls.spec.controller_name == self._controller]
