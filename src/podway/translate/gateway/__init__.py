"""Gateway API → IR listeners, pools, problems and statuses, in one pass.

``build_gateways`` takes every GatewayClass whose ``controllerName`` is ours, prepares
their Gateways (listeners, conflicts, certificates), then visits every route of every kind
oldest first (so "the oldest wins" falls out of visiting order), attaches it to listeners,
compiles it once and hands the result to the per-port builders. Each built port then asks the
translator's ``PortTable`` for its address:port; a refusal (the port is held by the Ingress
listeners or an older Gateway) marks its listeners unbound (``PortUnavailable``) before any
status is computed. A ``GatewayBuild`` comes back: listeners and pools, and ``conclude`` for
the statuses and problems.

The logic is ``translation.GatewayTranslation``; with a memo (the incremental translator's),
``memoized.MemoTranslation`` wraps its steps with what the previous run made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from podway.ir import Listener
from podway.model import ObjectRef
from podway.model.snapshot import Snapshot
from podway.translate.core.options import TranslateOptions
from podway.translate.core.ports import PortTable
from podway.translate.core.problems import Problem
from podway.translate.core.status import ObjectStatus
from podway.translate.gateway.attach import parent_key
from podway.translate.gateway.memo import GatewayMemo
from podway.translate.gateway.memoized import MemoTranslation
from podway.translate.gateway.translation import GatewayTranslation
from podway.translate.pools.backends import PoolSpec


@dataclass(frozen=True, slots=True)
class GatewayBuild:
    """The listeners and pools of the Gateway API kinds; their statuses and problems come from
    ``conclude`` (once: a memoised run keeps its route statuses for the next), which may run
    after the rest of the structure phase has used the pools (``translate.structure``)."""

    listeners: tuple[Listener, ...]
    pools: Mapping[str, PoolSpec]
    run: GatewayTranslation

    def conclude(self) -> tuple[Mapping[ObjectRef, ObjectStatus], tuple[Problem, ...]]:
        statuses, problems = self.run.conclude()
        return MappingProxyType(statuses), tuple(problems)


def build_gateways(snapshot: Snapshot, opts: TranslateOptions,
                   ports: PortTable, memo: GatewayMemo | None = None) -> GatewayBuild:
    """Gateways, routes and policies of our classes → listeners and pools (``conclude`` gives
    the statuses and problems).

    ``ports`` holds what was bound before (the Ingress listeners); the Gateways' ports are
    added to it, oldest Gateway first. ``memo`` (kept between runs by the incremental
    translator) makes a re-run cost O(change): see ``memo``.
    """
    run = (GatewayTranslation(snapshot=snapshot, opts=opts) if memo is None
           else MemoTranslation(snapshot=snapshot, opts=opts, memo=memo))
    listeners = run.build(ports)
    return GatewayBuild(listeners=tuple(listeners), pools=MappingProxyType(run.pools), run=run)


__all__ = ["GatewayBuild", "GatewayMemo", "GatewayTranslation", "MemoTranslation",
           "build_gateways", "parent_key"]
