"""The one runner between a source and the engines: translate, build, cache, publish a state.

``Pipeline`` takes any ``Source`` (a folder of manifests, the Kubernetes API): for each
``SourceUpdate`` it translates incrementally, builds the Envoy resources (memoised by IR
identity), sets them into the xDS cache (which pushes only the types whose content changed) and
publishes one immutable ``State``. Engines' decisions (ACKs and NACKs, reported by the xDS
server through ``on_event``) are the other input: a NACK becomes a ``Rejection`` record of the
refused resource, and a new state is published with it.

Invariants:

* Readers never reach into the pipeline: they take ``state``, ``await wait_for(predicate)`` or
  iterate ``states()``. A state is frozen; a newer one replaces it whole.
* ``State.version`` grows with every published state; ``State.generation`` counts the source
  updates applied (an engine decision publishes a new version with the same generation).
* ``states()`` coalesces: a slow reader sees the newest state when it wakes, never a backlog.
* When ``run`` ends (cancelled, or the source failed), ``wait_for`` raises ``PipelineStopped``
  and ``states()`` ends: no reader waits forever for a state that cannot come.
* Rejections are per (engine node, xDS type, resource). One clears when its resource is gone
  from the config, or when its content changed and the engine then ACKed that type; a rejection
  that names no resource clears at the next ACK of its type. Nothing else clears them, so the
  status never claims a refused listener is served.
* What a remote engine reports it serves not exactly as asked (``engine_findings``: HAProxy's
  ``UnsupportedValue`` findings) is added to the state's problems on those objects, per engine
  node, until that engine reports otherwise or its report stream ends.
* No I/O here besides the cache; the pipeline does not know which source runs or who reads.
* Engines first: ``run`` sets the cache, lets the xDS pushers take the loop for a few turns,
  then publishes the state; so readers' work never delays a push.
* The garbage collector is not the pipeline's business: ``podway.programs.gc_policy`` (applied by
the
  commands that serve) keeps collections out of a change's translate, build and push.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from podway.base.errors import PodwayError
from podway.engines.member_health import Finding, MemberHealthReports, Refused
from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.protocol import Ack, Event, Nack
from podway.ir import IR
from podway.model.base import ObjectRef
from podway.sources.base import Source, SourceUpdate
from podway.sources.last_good import LastGoodSecrets
from podway.translate import IncrementalTranslator, Problem, Result, TranslateOptions
from podway.translate.core.problems import Reason, Severity

log = logging.getLogger(__name__)


class PipelineStopped(PodwayError):
    """Awaited a state from a pipeline that is no longer running."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Timings:
    """Milliseconds each stage of one generation took."""

    translate_ms: float = 0.0
    build_ms: float = 0.0
    cache_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.translate_ms + self.build_ms + self.cache_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejection:
    """An engine refused one resource (``resource`` empty: Envoy's message named none)."""

    node: str
    type_url: str
    resource: str
    version: str
    message: str
    digest: str = ""  # the refused content's digest, to see it change

    @property
    def type_name(self) -> str:
        """``Listener``, ``Cluster``, … (the last part of the type URL)."""
        return self.type_url.rsplit(".", 1)[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class State:
    """Everything one applied generation produced, plus what the engines said about it."""

    version: int
    generation: int
    update: SourceUpdate
    result: Result
    rejections: tuple[Rejection, ...] = ()
    changed_types: tuple[str, ...] = ()  # xDS types this generation changed
    timings: Timings = Timings()

    @property
    def ir(self) -> IR:
        return self.result.ir

    @property
    def problems(self) -> tuple[Problem, ...]:
        return self.result.problems


class Pipeline:
    """Source updates and engine decisions in, immutable states out."""

    def __init__(self, source: Source, *, translate: TranslateOptions,
                 cache: Cache | None = None, detailed_stats: bool = False,
                 reuse_port: bool = False, clusters_first: bool = False) -> None:
        self.source = source
        # The first update's clusters and load assignments go to the cache (and to the
        # engines) as soon as they are built, ahead of its listeners and routes: Envoy warms
        # them (assignments, first checks) while the rest is built (``Cache.set_early``).
        self.clusters_first = clusters_first
        self.cache = cache if cache is not None else Cache()
        self.reuse_port = reuse_port  # Envoy listeners share their port (engine hand-over)
        self.detailed_stats = detailed_stats
        self._translator = IncrementalTranslator(translate)
        # The engine keeps every stat (``--envoy-stats detailed``): the routers make the
        # per-pool ones too (``podway.envoy.config.listeners._router``).
        self._builder = Builder(dynamic_stats=detailed_stats, reuse_port=reuse_port)
        self._secrets = LastGoodSecrets()
        self._state: State | None = None
        self._published = asyncio.Event()  # replaced by a fresh one at each publish
        self._rejections: dict[tuple[str, str, str], Rejection] = {}
        self._findings: dict[str, tuple[Finding, ...]] = {}  # engine node → its findings
        self._translated: Result | None = None  # the newest translation, without findings
        self._versions = 0
        self._stopped = False  # run() ended: no state will come any more

    @property
    def state(self) -> State | None:
        """The newest state (None before the first update is applied)."""
        return self._state

    async def run(self) -> None:
        """Apply every update of the source until cancelled.

        When it ends (cancelled, the source failed or ran out), waiters are woken and get
        ``PipelineStopped`` instead of waiting for a state that will never come.
        """
        try:
            await self._run()
        finally:
            self._stopped = True
            published, self._published = self._published, asyncio.Event()
            published.set()

    async def _run(self) -> None:
        reported: tuple[Problem, ...] = ()
        async for update in self.source.watch():
            if self.clusters_first and self._state is None:
                state = await self._apply_first(update)
            else:
                state = self._apply(update)
            # Engines first: the cache is set, so the xDS pushers are ready to run; the
            # readers (status writer, events, surfaces) do work proportional to the cluster
            # when a state arrives, which delayed the push by tens of ms (bench/convergence).
            for _ in range(ENGINE_TURNS):
                await asyncio.sleep(0)
            state = self._publish(self._as_of_now(state))
            log.info("applied update in %.1f ms: %s", state.timings.total_ms,
                     ", ".join(t.rsplit(".", 1)[-1] for t in state.changed_types) or "no change")
            if state.problems != reported:  # log problems when they change, not every update
                for problem in state.problems:
                    log.warning("%s", problem)
                reported = state.problems

    def apply(self, update: SourceUpdate) -> State:
        """Translate, build and cache one update; publish and return its state (no await)."""
        return self._publish(self._apply(update))

    def _apply(self, update: SourceUpdate) -> State:
        """Translate, build and cache one update: its state, not yet published."""
        t0 = time.perf_counter()
        update, result = self._translate(update)
        return self._built(update, result, t0, time.perf_counter())

    async def _apply_first(self, update: SourceUpdate) -> State:
        """``_apply``, with the pools' clusters set into the cache (and handed to the
        pushers) as soon as the structure phase has their settings, while the members are
        still being resolved; their load assignments next, before the listeners and routes
        are built. (Envoy applies 10,000 clusters in ~0.7 s: it works on them meanwhile.)"""
        t0 = time.perf_counter()
        update = self._secrets.guard(update)  # once: ``_translate`` below takes it guarded
        early = set(self.cache.set_early(self._builder.clusters_of(
            self._translator.first_pools(update.snapshot))))
        for _ in range(ENGINE_TURNS):
            await asyncio.sleep(0)
        update, result = self._translate(update, guarded=True)
        t1 = time.perf_counter()
        early.update(self.cache.set_early(self._builder.pools_of(result.ir)))
        for _ in range(ENGINE_TURNS):
            await asyncio.sleep(0)
        return self._built(update, result, t0, t1, early=tuple(early))

    def _translate(self, update: SourceUpdate, *, guarded: bool = False
                   ) -> tuple[SourceUpdate, Result]:
        if not guarded:
            update = self._secrets.guard(update)  # a bad rotation keeps the last good pair
        result = self._translator.update(update.snapshot, update.changed)
        self._translated = result
        return update, result

    def _built(self, update: SourceUpdate, result: Result, t0: float, t1: float, *,
               early: tuple[str, ...] = ()) -> State:
        """Build and cache a translated update: its state (``early``: types already set)."""
        resources = self._builder.build(result.ir, result.change)
        t2 = time.perf_counter()
        changes = {**dict.fromkeys(early), **self.cache.set(resources, hint=self._builder.hint)}
        t3 = time.perf_counter()
        self._drop_gone()
        previous = self._state
        return State(
            version=self._next_version(),
            generation=(previous.generation if previous else 0) + 1,
            update=update, result=self._with_findings(update, result),
            rejections=self._current(),
            changed_types=tuple(t for t in types.PUSH_ORDER if t in changes),
            timings=Timings(translate_ms=(t1 - t0) * 1000, build_ms=(t2 - t1) * 1000,
                            cache_ms=(t3 - t2) * 1000))

    def on_event(self, event: Event) -> None:
        """An engine's ACK or NACK (called by the xDS server, synchronously)."""
        before = self._current()
        if isinstance(event, Nack):
            self._record(event)
        elif isinstance(event, Ack):
            self._clear_accepted(event)
        after = self._current()
        if after != before and self._state is not None:
            self._publish(_replace_rejections(self._state, after, self._next_version()))

    def engine_refused(self, node: str, listener: str, reason: str) -> None:
        """An engine accepted ``listener`` and then could not serve it (its port taken on
        the engine's worker: Envoy sends no NACK then; issue 23.2). Recorded as that engine's
        rejection of the listener, exactly as a NACK naming it would be: its object gets the
        same condition, and the next update the engine accepts for it clears it."""
        self.on_event(Nack(node=node, type_url=types.LISTENER, version="", nonce="",
                           message=reason, resources=(listener,)))

    def hear_refusals(self, reports: MemberHealthReports) -> None:
        """Record each listener an engine reports it could not serve (``engine_refused``) and
        each object it serves not exactly as asked (``engine_findings``)."""
        reports.on_refused(lambda node, refusal: self.engine_refused(
            node, refusal.listener, refusal.reason))
        reports.on_findings(self.engine_findings)
        reports.on_refusing(self.engine_refusing)

    def engine_refusing(self, node: str, refusing: tuple[Refused, ...]) -> None:
        """An engine's current set of listeners it cannot serve (state, as the remote HAProxy
        engine reports it; ``()``: none, or it stopped reporting): each is that engine's
        rejection of the listener, as a NACK naming it would be, and one it no longer names is
        cleared, in a new state."""
        before = self._current()
        for key in [k for k in self._rejections if k[:2] == (node, types.LISTENER)]:
            del self._rejections[key]
        for refused in refusing:
            self._record(Nack(node=node, type_url=types.LISTENER, version="", nonce="",
                              message=refused.reason, resources=(refused.listener,)))
        after = self._current()
        if after != before and self._state is not None:
            self._publish(_replace_rejections(self._state, after, self._next_version()))

    def engine_findings(self, node: str, findings: tuple[Finding, ...]) -> None:
        """An engine's newest list of objects it serves not exactly as asked (``()``: none,
        or it stopped reporting). Each becomes that object's ``UnsupportedValue`` problem (an
        error when not served at all), as a local HAProxy engine's findings do, in a new
        state."""
        if findings:
            self._findings[node] = findings
        elif self._findings.pop(node, None) is None:
            return
        state = self._state
        if state is not None and self._translated is not None:
            self._publish(dataclasses.replace(
                state, version=self._next_version(),
                result=self._with_findings(state.update, self._translated)))

    def _with_findings(self, update: SourceUpdate, result: Result) -> Result:
        """``result`` with the engines' findings on objects the snapshot still holds."""
        found = sorted({f for findings in self._findings.values() for f in findings})
        if not found:
            return result
        present = {obj.ref for obj in update.snapshot.all()}
        extra = tuple(Problem(ref=ref, reason=Reason.UNSUPPORTED_VALUE, message=f.message,
                              severity=Severity.ERROR if f.closed else Severity.WARNING)
                      for f in found
                      if (ref := ObjectRef(f.kind, f.namespace, f.name)) in present)
        return dataclasses.replace(result, problems=result.problems + extra) if extra \
            else result

    async def wait_for(self, predicate: Callable[[State], bool]) -> State:
        """The first published state (the current one included) that satisfies ``predicate``;
        ``PipelineStopped`` once ``run`` has ended without one."""
        while True:
            state, published = self._state, self._published
            if state is not None and predicate(state):
                return state
            if self._stopped:
                raise PipelineStopped("the pipeline stopped before the awaited state")
            await published.wait()

    async def states(self) -> AsyncIterator[State]:
        """The current state (if any), then each newer one; coalesced for slow readers. Ends
        when the pipeline's ``run`` ends."""
        seen = 0
        while True:
            try:
                state = await self.wait_for(functools.partial(_newer_than, seen))
            except PipelineStopped:
                return  # the run ended: so do its readers
            seen = state.version
            yield state

    def _publish(self, state: State) -> State:
        self._state = state
        published, self._published = self._published, asyncio.Event()
        published.set()
        return state

    def _as_of_now(self, state: State) -> State:
        """``state`` with the rejections as they are now and a version above every published
        one (an engine may have answered, and a state been published, while pushers ran)."""
        rejections = self._current()
        newest = self._state.version if self._state is not None else 0
        if rejections == state.rejections and state.version > newest:
            return state
        version = state.version if state.version > newest else self._next_version()
        return _replace_rejections(state, rejections, version)

    def _next_version(self) -> int:
        self._versions += 1
        return self._versions

    def _current(self) -> tuple[Rejection, ...]:
        return tuple(self._rejections[k] for k in sorted(self._rejections))

    def _digest(self, type_url: str, name: str) -> str:
        resource = self.cache.get(type_url).resources.get(name)
        return resource.digest if resource is not None else ""

    def _record(self, nack: Nack) -> None:
        names = nack.resources or refused_names(
            nack.message, self.cache.get(nack.type_url).resources)
        if not names:
            self._rejections[(nack.node, nack.type_url, "")] = Rejection(
                node=nack.node, type_url=nack.type_url, resource="", version=nack.version,
                message=nack.message)
            return
        for name in names:
            self._rejections[(nack.node, nack.type_url, name)] = Rejection(
                node=nack.node, type_url=nack.type_url, resource=name, version=nack.version,
                message=nack.message, digest=self._digest(nack.type_url, name))

    def _clear_accepted(self, ack: Ack) -> None:
        for key, rejection in list(self._rejections.items()):
            if (rejection.node, rejection.type_url) != (ack.node, ack.type_url):
                continue
            if ack.resources:  # the engine names what it took: exactly those are cleared
                accepted = rejection.resource in ack.resources
            else:
                accepted = not rejection.resource or (
                    self._digest(rejection.type_url, rejection.resource) != rejection.digest)
            if accepted:
                del self._rejections[key]

    def _drop_gone(self) -> None:
        for key, rejection in list(self._rejections.items()):
            if rejection.resource and not self._digest(rejection.type_url, rejection.resource):
                del self._rejections[key]


#: Event-loop turns the xDS pushers get after the cache is set and before the state is
#: published: a pusher wakes through its event's waiter and ``asyncio.wait`` (two turns), then
#: hands the response to gRPC; the rest are margin.
ENGINE_TURNS = 4


def _newer_than(version: int, state: State) -> bool:
    return state.version > version


def _replace_rejections(state: State, rejections: tuple[Rejection, ...], version: int) -> State:
    return State(version=version, generation=state.generation, update=state.update,
                 result=state.result, rejections=rejections, changed_types=state.changed_types,
                 timings=state.timings)


def refused_names(message: str, candidates: Iterable[str]) -> tuple[str, ...]:
    """Fallback when a NACK lists no resources: the candidate names Envoy's message mentions.

    Envoy names what it refused ("Error adding/updating listener(s) NAME: cannot bind ...,
    NAME2: ..."); a name counts only as a whole token (``…/80`` does not match ``…/8080``).
    """
    found = []
    for name in candidates:
        at = message.find(name)
        while at >= 0:
            end = at + len(name)
            if (at == 0 or message[at - 1] in _BEFORE) and (
                    end == len(message) or message[end] in _AFTER):
                found.append(name)
                break
            at = message.find(name, at + 1)
    return tuple(sorted(found))


_BEFORE = frozenset(" \t\n'\"(,[")
_AFTER = frozenset(" \t\n'\"):,]")
