"""The NodePortLocal opt-in of the Services the controller serves in ``nodeportlocal`` mode.

Which mode each Service is served in — the effective mode, make-before-break — is the mode gate's
(``podway.sources.mode_gate``).

``npl_plan`` is the pure decision behind the ``nodeportlocal.antrea.io/enabled`` annotation: the
controller adds it (with the marker ``podway.io/npl-managed``) to every Service it serves in
``nodeportlocal`` mode, and removes it only where its marker says it added it. ``NplPlanner``
gives the same plan state after state, judging again only the Services whose object (by
identity), served-ness (a pool made from it, by pool identity) or hold changed — every one when
the default mode changes — so a new route does not cost a pass over every Service.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from podway.base.mapdiff import MapDiff
from podway.ir import IR, Pool
from podway.model import Service, npl
from podway.model.snapshot import Key
from podway.translate import BackendMode
from podway.translate import annotations as ann


@dataclass(frozen=True, slots=True, kw_only=True)
class NplPlan:
    """Services to annotate (enable NPL, mark as ours) and to clear (only ours)."""

    enable: tuple[Key, ...] = ()
    disable: tuple[Key, ...] = ()


def served_services(ir: IR) -> frozenset[Key]:
    """Services at least one pool of the IR is made from."""
    return frozenset((p.origin.namespace, p.origin.name) for p in ir.pools.values()
                     if p.origin is not None and p.origin.kind == "Service")


def npl_plan(services: Iterable[Service], *, served: frozenset[Key],
             requested: Mapping[Key, BackendMode]) -> NplPlan:
    """Enable NPL on served Services whose requested mode is ``nodeportlocal`` and that lack it;
    disable it on Services Podway marked that it no longer serves in that mode."""
    enable, disable = [], []
    for service in services:
        verdict = _npl_verdict(service, service.key in served, requested.get(service.key))
        if verdict is True:
            enable.append(service.key)
        elif verdict is False:
            disable.append(service.key)
    return NplPlan(enable=tuple(sorted(enable)), disable=tuple(sorted(disable)))


def _npl_verdict(service: Service, served: bool, requested: BackendMode | None) -> bool | None:
    """True: enable NPL on it; False: clear it (ours); None: leave it."""
    annotations = service.metadata.annotations
    wanted = served and requested is BackendMode.NODEPORTLOCAL
    if wanted and annotations.get(npl.ENABLED_ANNOTATION) != "true":
        return True
    if not wanted and annotations.get(ann.NPL_MANAGED.name) == "true":
        return False
    return None


class NplPlanner:
    """``npl_plan`` from one state to the next, judging only what changed (module docstring)."""

    def __init__(self) -> None:
        self._services: MapDiff[Key] = MapDiff()
        self._pools: Mapping[str, Pool] = MappingProxyType({})
        self._pool_diff: MapDiff[str] = MapDiff()
        self._served: Counter[Key] = Counter()  # pools made from each Service
        self._default: BackendMode | None = None
        self._held: Mapping[Key, object] = {}
        self._verdicts: dict[Key, bool] = {}
        self._plan = NplPlan()

    def plan(self, services: Mapping[Key, Service], pools: Mapping[str, Pool], *,
             requested: Callable[[Service], BackendMode], default: BackendMode,
             held: Mapping[Key, object],
             known: tuple[Mapping[str, Pool], Iterable[str]] | None = None) -> NplPlan:
        """The plan ``npl_plan`` gives for these Services and pools (``requested``: each
        Service's requested mode, which follows ``default`` and the ``held`` Services;
        ``known``: the translator's word on the pools replaced, see ``MapDiff.update``)."""
        keys = set(self._services.update(services))
        for name in self._pool_diff.update(pools, known=known):
            for pool, step in ((self._pools.get(name), -1), (pools.get(name), 1)):
                origin = pool.origin if pool is not None else None
                if origin is not None and origin.kind == "Service":
                    key = (origin.namespace, origin.name)
                    self._served[key] += step
                    if self._served[key] <= 0:
                        del self._served[key]
                    keys.add(key)
        keys.update(k for k in held.keys() | self._held.keys()
                    if held.get(k) != self._held.get(k))
        if default is not self._default:
            keys = set(services) | set(self._verdicts)
        changed = False
        for key in keys:
            service = services.get(key)
            verdict = None if service is None else _npl_verdict(
                service, self._served[key] > 0, requested(service))
            if verdict is None:
                changed |= self._verdicts.pop(key, None) is not None
            elif self._verdicts.get(key) is not verdict:
                self._verdicts[key] = verdict
                changed = True
        if changed:
            self._plan = NplPlan(
                enable=tuple(sorted(k for k, v in self._verdicts.items() if v)),
                disable=tuple(sorted(k for k, v in self._verdicts.items() if not v)))
        self._pools, self._default = pools, default
        self._held = dict(held)
        return self._plan
