"""Pods waiting for their NodePortLocal mapping: warn only when the wait lasts, say when it ends.

A new pod of a Service in ``nodeportlocal`` mode is pending until the node's agent writes its
``nodeportlocal.antrea.io`` annotation: normally a fraction of a second, the agent's next step.
Warning on every such moment filled a newcomer's first ``kubectl get events`` with
``PendingMembers`` for states that were already over. ``PendingWarnings`` is pure: fed the pending
pods per Service at each tick, it says which events are due —

* a Warning ``PendingMembers`` when a Service has had pods pending for ``grace_s`` seconds (the
  same set again is not repeated; a changed set that still waits is warned once more);
* a Normal ``MembersReady`` when a Service that was warned about has no pod pending any more, so
  the latest event on the object says the problem is over.

A Service whose pods wait less than ``grace_s`` gets no event at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from podway.model.base import ObjectRef
from podway.model.snapshot import Key
from podway.programs.controller.events import Due

GRACE_S = 5.0  # longer than an agent's annotation normally takes (its next step)


@dataclass(slots=True)
class PendingWarnings:
    grace_s: float = GRACE_S
    _since: dict[Key, float] = field(default_factory=dict)  # Service → pending since
    _warned: dict[Key, tuple[str, ...]] = field(default_factory=dict)  # Service → pods warned

    def due(self, pending: Mapping[Key, tuple[str, ...]], *, now: float) -> list[Due]:
        out: list[Due] = []
        for key in list(self._since):
            if not pending.get(key):
                del self._since[key]
        for key in sorted(self._warned):
            if not pending.get(key):
                del self._warned[key]
                out.append(Due(ref=ObjectRef("Service", *key), type="Normal",
                               reason="MembersReady",
                               message="every pod has its NodePortLocal mapping"))
        for key, pods in sorted(pending.items()):
            if not pods:
                continue
            since = self._since.setdefault(key, now)
            if now - since >= self.grace_s and self._warned.get(key) != pods:
                self._warned[key] = pods
                out.append(Due(ref=ObjectRef("Service", *key), type="Warning",
                               reason="PendingMembers",
                               message=f"pods waiting {now - since:.0f} s for their "
                                       f"NodePortLocal annotation (is the node's agent "
                                       f"running?): {', '.join(pods[:10])}"
                                       f"{' …' if len(pods) > 10 else ''}"))
        return out
