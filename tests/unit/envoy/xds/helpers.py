"""Small IR factories for xDS unit tests."""

from __future__ import annotations

from types import MappingProxyType

from podway.ir import (
    IR,
    Forward,
    Listener,
    Member,
    ObjectRef,
    PathKind,
    PathMatch,
    Pool,
    Route,
    RouteMatch,
    VirtualHost,
    WeightedPool,
    WildcardMode,
)
from podway.ir import ListenerProtocol as Protocol

ORIGIN = ObjectRef("Ingress", "default", "web")


def route(name: str, path: str, pool: str | None, *, kind: PathKind = PathKind.PREFIX,
          shares: tuple[WeightedPool, ...] | None = None) -> Route:
    backends = shares if shares is not None else (WeightedPool(pool=pool),)
    return Route(name=name, match=RouteMatch(path=PathMatch(kind=kind, value=path)),
                 action=Forward(backends=backends), origin=ORIGIN)


def http_listener(*vhosts: VirtualHost, port: int = 8080) -> Listener:
    return Listener(name="listener/http", address="127.0.0.1", port=port,
                    protocol=Protocol.HTTP, virtual_hosts=vhosts)


def vhost(hostname: str, *routes: Route,
          wildcard: WildcardMode = WildcardMode.ONE_LABEL) -> VirtualHost:
    return VirtualHost(name=f"vhost/{hostname}", hostname=hostname, wildcard=wildcard,
                       routes=routes)


def pool(name: str, *ports: int) -> Pool:
    return Pool(name=name, members=tuple(Member(address="127.0.0.1", port=p) for p in ports))


def ir(listeners: tuple[Listener, ...], *pools: Pool) -> IR:
    return IR(listeners=listeners, pools=MappingProxyType({p.name: p for p in pools}))
