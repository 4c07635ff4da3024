"""IR → Envoy v3 resources: a pure function plus a memo that makes repeated builds O(change).

``build(ir)`` returns every resource, keyed by type URL and name. ``Builder`` remembers what it
built for each IR node *by identity*: the incremental translator hands back the very same
``Listener`` objects after an endpoint-only change and replaces only the changed ``Pool`` objects,
so the next build re-serialises only those pools' load assignments. Each resource carries the
digest of its serialised bytes; the cache (``podway.xds.cache``) uses it to keep versions of
unchanged resources, which is what keeps listeners, routes and clusters untouched in Envoy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from google.protobuf import any_pb2
from google.protobuf.message import Message

from podway.ir import IR, Listener, Persistence, Pool, PoolSettings, Protocol
from podway.xds import types
from podway.xds.build.clusters import cluster
from podway.xds.build.endpoints import load_assignment
from podway.xds.build.listeners import listener
from podway.xds.build.routes import route_configuration
from podway.xds.build.secrets import secret


@dataclass(frozen=True, slots=True)
class Resource:
    """One built resource: its message, the packed ``Any`` sent to Envoy, and a content digest."""

    name: str
    message: Message
    packed: any_pb2.Any
    digest: str

    @classmethod
    def of(cls, name: str, message: Message) -> Resource:
        data = message.SerializeToString(deterministic=True)
        packed = any_pb2.Any(
            type_url="type.googleapis.com/" + message.DESCRIPTOR.full_name, value=data)
        return cls(name, message, packed, hashlib.blake2b(data, digest_size=12).hexdigest())


Resources = Mapping[str, Mapping[str, Resource]]  # type URL → name → resource


def build(ir: IR) -> Resources:
    """Every Envoy resource for ``ir`` (no memo)."""
    return Builder().build(ir)


class Builder:
    """Builds resources, reusing the previous build's output for identical IR nodes."""

    def __init__(self) -> None:
        self._listeners: dict[int, tuple[Listener, tuple[Resource, ...]]] = {}
        self._routes: dict[tuple[int, tuple[tuple[str, Persistence], ...]],
                           tuple[Listener, Resource]] = {}
        self._clusters: dict[tuple[str, PoolSettings], Resource] = {}
        self._endpoints: dict[int, tuple[Pool, Resource]] = {}

    def build(self, ir: IR) -> Resources:
        out: dict[str, dict[str, Resource]] = {t: {} for t in types.PUSH_ORDER}
        persistence = {name: pool.settings.persistence for name, pool in ir.pools.items()
                       if pool.settings.persistence is not None}
        signature = tuple(sorted(persistence.items(), key=lambda kv: kv[0]))
        listeners: dict[int, tuple[Listener, tuple[Resource, ...]]] = {}
        routes: dict[tuple[int, tuple[tuple[str, Persistence], ...]],
                     tuple[Listener, Resource]] = {}
        for item in ir.listeners:
            cached = self._listeners.get(id(item))
            built = cached[1] if cached is not None and cached[0] is item else _listener(item)
            listeners[id(item)] = (item, built)
            for resource in built:
                out[_type_of(resource)].setdefault(resource.name, resource)
            if item.protocol in (Protocol.HTTP, Protocol.HTTPS) and built:
                key = (id(item), signature)
                hit = self._routes.get(key)
                if hit is not None and hit[0] is item:
                    route = hit[1]
                else:
                    route = Resource.of(item.name, route_configuration(
                        item, persistence=MappingProxyType(persistence)))
                routes[key] = (item, route)
                out[types.ROUTE][route.name] = route
        clusters: dict[tuple[str, PoolSettings], Resource] = {}
        endpoints: dict[int, tuple[Pool, Resource]] = {}
        for name, pool in ir.pools.items():
            ckey = (name, pool.settings)
            resource = self._clusters.get(ckey) or Resource.of(name, cluster(name, pool.settings))
            clusters[ckey] = resource
            out[types.CLUSTER][name] = resource
            hit_e = self._endpoints.get(id(pool))
            if hit_e is not None and hit_e[0] is pool:
                eresource = hit_e[1]
            else:
                eresource = Resource.of(name, load_assignment(name, pool.members))
            endpoints[id(pool)] = (pool, eresource)
            out[types.ENDPOINT][name] = eresource
        self._listeners, self._routes = listeners, routes
        self._clusters, self._endpoints = clusters, endpoints
        return {t: MappingProxyType(v) for t, v in out.items()}


def _listener(item: Listener) -> tuple[Resource, ...]:
    """The listener and its secrets; nothing for a listener Envoy could not serve."""
    if item.protocol is Protocol.HTTPS and not item.certificates:
        return ()  # no certificate yet: Envoy rejects a TLS listener without filter chains
    if item.protocol is Protocol.TLS and not item.l4_routes:
        return ()
    built = [Resource.of(item.name, listener(item))]
    built.extend(Resource.of(c.name, secret(c)) for c in item.certificates)
    return tuple(built)


def _type_of(resource: Resource) -> str:
    type_url: str = resource.packed.type_url
    return type_url


__all__ = ["Builder", "Resource", "Resources", "build"]
