"""A GatewayClass's ``engineKind`` against the engines that serve its Gateways.

The engine kind of a class (``GatewayClassConfig.spec.engineKind``,
``podway.translate.gateway.parameters``) does not choose engines: an engine group runs the
kind its engines were started as (``podway engine --engine``), and the controller's
configuration may pin a group's kind (``engineGroups``; engines of another kind are then
refused: ``podway.engines.config_feed.refusal``). So a class meant for HAProxy whose Gateways
land in a group of Envoys would be served by Envoy without a word. This says it: a Warning
``EngineKindMismatch`` on each such Gateway, naming the class's kind and the other kind —
the group's configured kind, or the kinds of the engines connected now that serve the
Gateway's group (those of the group, and those without a group, which serve everything).

Connected engines are known by their streams: an Envoy by its ADS stream (kind ``envoy``), a
HAProxy or kernel engine by its configuration stream, whose request names its kind. ``follow``
looks when engines come or go, and every ``period_s`` (a class or Gateway edit, a new
configuration file); events are due when a Gateway's mismatch appears or changes (not again
while it holds); a new leadership term says them again (``reset``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.model.gateway import Gateway, GatewayClass
from podway.programs.controller.events import Due
from podway.programs.controller.groups import group_of
from podway.translate.gateway.parameters import ClassParameters, class_parameters

if TYPE_CHECKING:
    from podway.envoy.xds.server import XdsServer
    from podway.programs.controller.events import EventRecorder
    from podway.programs.controller.main import Controller

REASON = "EngineKindMismatch"
Engines = Mapping[str, tuple[str, str]]  # node → (group, "": none; kind)


def mismatches(snapshot: Snapshot, *, controller_name: str, configured: Mapping[str, str],
               engines: Engines) -> dict[ObjectRef, str]:
    """Each Gateway of ours whose class names an engine kind that the engines serving it are
    not, with the message saying so."""
    wanted: dict[str, tuple[str, str]] = {}  # class → (kind, parameters' name)
    for cls in snapshot.kind(GatewayClass).values():
        ref = cls.spec.parameters_ref
        if cls.spec.controller_name != controller_name or ref is None:
            continue
        params = class_parameters(cls, snapshot)
        if isinstance(params, ClassParameters) and params.engine_kind is not None:
            wanted[cls.metadata.name] = (params.engine_kind, f"{ref.kind} {ref.name}")
    if not wanted:
        return {}
    groups = group_of(snapshot)
    out: dict[ObjectRef, str] = {}
    for gw in snapshot.kind(Gateway).values():
        found = wanted.get(gw.spec.gateway_class_name)
        if found is None:
            continue
        kind, source = found
        group = groups(gw.ref)
        why = _why(kind, group, configured, engines)
        if why is not None:
            out[gw.ref] = (f"GatewayClass {gw.spec.gateway_class_name} is meant for {kind} "
                           f"engines (engineKind of {source}), but {why}: they serve this "
                           "Gateway; start its group's engines with --engine " + kind +
                           " or change the class's engineKind")
    return out


def _why(kind: str, group: str, configured: Mapping[str, str], engines: Engines) -> str | None:
    pinned = configured.get(group)
    if pinned is not None and pinned != kind:
        return (f"engine group {group!r} is configured for {pinned} engines (engineGroups in "
                "the controller's configuration)")
    other = sorted(f"{node} ({engine})" for node, (their, engine) in engines.items()
                   if their in (group, "") and engine != kind)
    if not other:
        return None
    shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
    return f"engine group {group!r} is served by {shown}"


class KindMismatches:
    """The Warnings due, once per mismatch (see the module docstring)."""

    def __init__(self, *, controller_name: str) -> None:
        self._controller = controller_name
        self._last: dict[ObjectRef, str] = {}

    def reset(self) -> None:
        self._last = {}

    def due(self, snapshot: Snapshot, *, configured: Mapping[str, str],
            engines: Engines) -> list[Due]:
        now = mismatches(snapshot, controller_name=self._controller, configured=configured,
                         engines=engines)
        out = [Due(ref=ref, type="Warning", reason=REASON, message=message[:1000])
               for ref, message in now.items() if self._last.get(ref) != message]
        self._last = now
        return out


def connected(ads: Mapping[str, str], fed: Engines) -> Engines:
    """Every engine connected now → (its group, its kind): Envoys on ADS (node → group), the
    others on the configuration stream."""
    return {**{node: (group, "envoy") for node, group in ads.items()}, **fed}


async def follow(controller: Controller, server: XdsServer, events: EventRecorder, *,
                 period_s: float = 5.0) -> None:
    """Record the Warnings due each time engines come or go and every ``period_s``, until
    cancelled (nothing with ``write_events`` off); a new leadership term says them again."""
    if not controller.opts.write_events:
        return
    tracker = KindMismatches(controller_name=controller.opts.translate.gateway_controller)
    ads, fed = server.servicer, controller.feed
    changed = asyncio.Event()
    for listeners in (ads.on_engines, fed.on_engines):
        listeners.append(changed.set)
    term = 0
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(period_s):
                await changed.wait()
        changed.clear()
        state = controller.pipeline.state if controller.pipeline is not None else None
        fence = controller.leadership.fence()
        if state is None or not fence.valid():
            continue
        if fence.term != term:
            term = fence.term
            tracker.reset()
        due = tracker.due(state.update.snapshot, configured=controller.live.engine_kinds,
                          engines=connected(ads.engine_groups, fed.engine_kinds))
        if due:
            await events.record(due)
