"""Engine groups: each engine serves the part of the configuration its group owns (like AKO's
service-engine groups), or all of it.

An engine names its group in its xDS node metadata (``podway.io/engine-group``, set by
``podway engine --engine-group``); an engine without one gets everything. A LoadBalancer
Service or a Gateway chooses its group with the annotation ``podway.io/engine-group`` (a
Gateway also with that label in ``spec.infrastructure.labels``); every other object, and those
that choose none, belong to the group ``default``. The same choice picks the object's VIP
pools (``podway.programs.ipam``).

``subset(ir, group, groups_of)`` is pure: the listeners with at least one origin in the group
(a listener made from objects of several groups — an Ingress port shared with nothing else is
``default`` — goes to each of them), and exactly the pools those listeners route to. Nothing of
another group reaches the engine: not its listeners, route tables, clusters, endpoints or TLS
certificates.

``EngineGroups`` keeps one xDS ``Cache`` (with its own ``Builder``, so unchanged IR nodes cost
nothing) per group an engine asked for, made on the first request of such an engine and then
refreshed from every pipeline state by its own task (``follow``): a slow status writer never
delays a group's push. Groups nobody asked for cost nothing; with no group in use the
controller builds nothing twice. A group's cache stays while the controller runs (its engines
reconnect to the same versions). The main cache (every resource) stays the pipeline's.
Since any engine may name any group (and each group's cache is rebuilt on every state), at most
``MAX_GROUPS`` groups get a cache and a name is at most ``MAX_GROUP_NAME`` characters (a label
value's limit); ``cache_for`` refuses others with ``GroupRefused`` (the xDS server ends that
stream with one line).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from podway.base.errors import PodwayError
from podway.engines import config_feed
from podway.engines.config_feed import ConfigFeed
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.ir import IR, AuthRequest, ErrorPages, ExtAuth, Forward, Jwt, Listener, Mirror, Oidc
from podway.model import Service
from podway.model.base import ENGINE_GROUP, ObjectRef
from podway.model.gateway import Gateway
from podway.model.snapshot import Snapshot
from podway.pipeline import Pipeline, State
from podway.translate.gateway.parameters import gateway_engine_group

log = logging.getLogger(__name__)

GROUP_METADATA = ENGINE_GROUP  # the key in an engine's xDS node metadata
DEFAULT_GROUP = "default"
MAX_GROUPS = 64  # groups with their own cache
MAX_GROUP_NAME = 63  # characters, as a Kubernetes label value


class GroupRefused(PodwayError):
    """An engine group that gets no cache: its name is too long, or too many groups exist."""

GroupOf = Callable[[ObjectRef], str]


def group_of(snapshot: Snapshot) -> GroupOf:
    """The group each object belongs to: a Service's or Gateway's choice
    (``K8sObject.engine_group``: the annotation; a Gateway's infrastructure label too), for a
    Gateway else its GatewayClass's parameters (``engineGroup``), else default."""
    def lookup(ref: ObjectRef) -> str:
        model = {Service.KIND: Service, Gateway.KIND: Gateway}.get(ref.kind)
        obj = snapshot.get(model, ref.namespace, ref.name) if model is not None else None
        if isinstance(obj, Gateway):  # its own choice, else its class's parameters'
            return (obj.engine_group() or gateway_engine_group(obj.spec.gateway_class_name,
                                                               snapshot) or DEFAULT_GROUP)
        return (obj.engine_group() if obj is not None else None) or DEFAULT_GROUP
    return lookup


def pools_of(listener: Listener) -> Iterable[str]:
    """Every pool ``listener`` sends traffic to (forwards, mirrors, auth services, L4
    backends)."""
    for vhost in listener.virtual_hosts:
        for route in vhost.routes:
            if isinstance(route.action, Forward):
                yield from (b.pool for b in route.action.backends if b.pool is not None)
            yield from (f.pool for f in route.filters
                        if isinstance(f, Mirror | ExtAuth | AuthRequest | ErrorPages | Oidc))
            yield from (p.jwks_pool for f in route.filters if isinstance(f, Jwt)
                        for p in f.providers if p.jwks_pool)
    for l4 in listener.l4_routes:
        yield from (b.pool for b in l4.backends if b.pool is not None)


def subset(ir: IR, group: str, groups_of: GroupOf) -> IR:
    """The part of ``ir`` an engine of ``group`` serves (see the module docstring)."""
    listeners = tuple(item for item in ir.listeners
                      if any(groups_of(origin) == group for origin in item.origins))
    used = {name for item in listeners for name in pools_of(item)}
    pools = {name: pool for name, pool in ir.pools.items() if name in used}
    return IR(listeners=listeners, pools=MappingProxyType(pools))


class EngineGroups:
    """A cache per engine group asked for, kept up to date from the pipeline's states."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline
        self._caches: dict[str, tuple[Cache, Builder]] = {}
        self._seen: tuple[object, object] = (None, None)

    @property
    def groups(self) -> Mapping[str, Cache]:
        return MappingProxyType({name: cache for name, (cache, _) in self._caches.items()})

    def cache_for(self, group: str) -> Cache:
        """The cache of ``group`` (made now, filled from the current state, if new);
        ``GroupRefused`` past the bounds (module docstring)."""
        known = self._caches.get(group)
        if known is not None:
            return known[0]
        if len(group) > MAX_GROUP_NAME:
            raise GroupRefused(f"engine group name longer than {MAX_GROUP_NAME} characters")
        if len(self._caches) >= MAX_GROUPS:
            raise GroupRefused(f"engine group {group!r} refused: {MAX_GROUPS} groups are "
                               "served already")
        cache, builder = Cache(), Builder(reuse_port=self._pipeline.reuse_port,
                                  dynamic_stats=self._pipeline.detailed_stats)
        self._caches[group] = (cache, builder)
        log.info("engine group %s: first engine; serving its part of the configuration", group)
        state = self._pipeline.state
        if state is not None:
            self._fill(group, cache, builder, state)
        return cache

    async def follow(self) -> None:
        """Refresh every group's cache from each new state, until cancelled."""
        async for state in self._pipeline.states():
            self.refresh(state)

    def refresh(self, state: State) -> None:
        if state.ir is self._seen[0] and state.update.snapshot is self._seen[1]:
            return  # an engine decision (ACK/NACK), not new configuration
        self._seen = (state.ir, state.update.snapshot)
        for group, (cache, builder) in self._caches.items():
            self._fill(group, cache, builder, state)

    @staticmethod
    def _fill(group: str, cache: Cache, builder: Builder, state: State) -> None:
        cache.set(builder.build(subset(state.ir, group, group_of(state.update.snapshot))))


def envoy_cache(groups: EngineGroups, kinds: Callable[[], Mapping[str, str]], group: str
                ) -> Cache:
    """The xDS cache of ``group`` for an Envoy; ``GroupRefused`` when the controller's
    configuration (``kinds()``: group → engine kind) gives the group to engines of another
    kind (``config_feed.refusal``)."""
    why = config_feed.refusal(kinds(), group, "envoy")
    if why is not None:
        raise GroupRefused(why)
    return groups.cache_for(group)


async def feed(pipeline: Pipeline, to: ConfigFeed) -> None:
    """Publish each new IR to the configuration streams of HAProxy and kernel engines
    (``podway.engines.config_feed``): a group's engines get ``subset`` of it, exactly what an
    Envoy of the group is sent; an engine without a group the whole."""
    seen: object = None
    async for state in pipeline.states():
        if state.ir is seen:
            continue  # an engine's ACK or NACK, not new configuration
        seen = state.ir
        to.publish(state.generation, functools.partial(
            group_ir, state.ir, group_of(state.update.snapshot)))


def group_ir(ir: IR, groups_of: GroupOf, group: str) -> IR:
    """What an engine of ``group`` is sent ("": no group, everything)."""
    return subset(ir, group, groups_of) if group else ir
