"""Backends: a Service port becomes a pool spec (name + settings), members come later.

Route translation only asks for a pool *name* (``PoolSpec``); members are resolved afterwards,
per pool, by a ``MemberResolver`` (``podway.translate.pools.members``). That split is what makes
endpoint changes incremental: a changed EndpointSlice re-resolves the pools of its Service and
nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from podway.ir import PoolProtocol, PoolSettings
from podway.model import ObjectRef, Service, npl
from podway.model.core import ServicePort
from podway.model.snapshot import NO_MODES, Key
from podway.translate import annotations as ann
from podway.translate.core.options import BackendMode, TranslateOptions

ServiceKey = Key  # (namespace, name) of a Service


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpec:
    """What a pool is made of, before members are known."""

    name: str
    service: ServiceKey
    port: ServicePort
    settings: PoolSettings
    origin: ObjectRef
    external_traffic_policy: str | None = None
    mode: BackendMode | None = None  # the Service's backend mode (None: the default)


_APP_PROTOCOLS = {
    "kubernetes.io/h2c": PoolProtocol.HTTP2,
    "h2c": PoolProtocol.HTTP2,
    "http2": PoolProtocol.HTTP2,
    "grpc": PoolProtocol.GRPC,
    "kubernetes.io/grpc": PoolProtocol.GRPC,
}


def http_pool(service: Service, port: ServicePort) -> PoolSpec:
    """The L7 pool of one Service port; ``appProtocol`` picks HTTP/2 or gRPC upstream."""
    ns, name = service.key
    protocol = _APP_PROTOCOLS.get((port.app_protocol or "").lower(), PoolProtocol.HTTP1)
    return PoolSpec(name=f"pool/{ns}/{name}/{port.port}", service=service.key, port=port,
                    settings=PoolSettings(protocol=protocol), origin=service.ref,
                    external_traffic_policy=service.spec.external_traffic_policy)


def l4_pool(service: Service, port: ServicePort) -> PoolSpec:
    """The L4 pool of one Service port (TCP or UDP)."""
    ns, name = service.key
    protocol = PoolProtocol.UDP if port.protocol == "UDP" else PoolProtocol.TCP
    return PoolSpec(name=f"pool/{ns}/{name}/{port.port}/{protocol.value}", service=service.key,
                    port=port, settings=PoolSettings(protocol=protocol), origin=service.ref,
                    external_traffic_policy=service.spec.external_traffic_policy)


def find_port(service: Service, *, number: int | None = None, name: str | None = None,
              protocol: str | None = None) -> ServicePort | None:
    """The Service port by number or name; with ``protocol``, one of that protocol first
    (53/UDP and 53/TCP share a number)."""
    found = [port for port in service.spec.ports
             if (number is not None and port.port == number)
             or (name is not None and port.name == name)]
    preferred = [port for port in found if protocol is None or port.protocol == protocol]
    chosen = preferred or found
    return chosen[0] if chosen else None




def service_mode(service: Service, opts: TranslateOptions,
                 modes: Mapping[Key, str] = NO_MODES) -> BackendMode:
    """The Service's backend mode: its entry in ``modes`` (``Snapshot.backend_modes``: decided
    outside the translator), else its ``podway.io/backend-mode`` annotation when that names a
    mode, else the default (``opts.mode``). A value that names no mode is a problem reported by
    the translator (``invalid_mode``), and the default applies."""
    decided = modes.get(service.key) if modes else None
    if decided is not None:
        return BackendMode(decided)
    value = service.metadata.annotations.get(ann.BACKEND_MODE.name)
    try:
        return BackendMode(value) if value is not None else opts.mode
    except ValueError:
        return opts.mode


#: ``nodeport`` mode: how long a connection to a node carries requests (``PoolSettings``).
NODEPORT_CONNECTION_LIFETIME_MS = 1000
_HTTP = (PoolProtocol.HTTP1, PoolProtocol.HTTP2, PoolProtocol.GRPC)


def in_mode(spec: PoolSpec, service: Service, opts: TranslateOptions,
            modes: Mapping[Key, str] = NO_MODES) -> PoolSpec:
    """``spec`` in its Service's mode (``service_mode``). HTTP pools in ``nodeport`` mode get a
    bounded connection life: kube-proxy pins each connection to one pod, so a pooled one would
    follow a terminating pod until it dies, taking the requests in flight with it."""
    mode = service_mode(service, opts, modes)
    settings = spec.settings
    if mode is BackendMode.NODEPORT and settings.protocol in _HTTP:
        settings = replace(settings, connection_lifetime_ms=NODEPORT_CONNECTION_LIFETIME_MS)
    return replace(spec, mode=mode, settings=settings)


def invalid_mode(service: Service) -> str | None:
    """Why the Service's backend-mode annotation is refused, if it is."""
    value = service.metadata.annotations.get(ann.BACKEND_MODE.name)
    if value is None or value in {m.value for m in BackendMode}:
        return None
    return (f"annotation {ann.BACKEND_MODE.name}: {value[:64]!r} is not a backend mode (one of "
            f"{', '.join(m.value for m in BackendMode)}); the default applies")


def mode_problem(service: Service, port: ServicePort, opts: TranslateOptions,
                 modes: Mapping[Key, str] = NO_MODES) -> str | None:
    """Why ``port`` of ``service`` cannot be a backend in its mode, if it cannot."""
    ns, name = service.key
    if service_mode(service, opts, modes) is not BackendMode.NODEPORT or port.node_port:
        return None
    kind = service.spec.type
    if kind in ("NodePort", "LoadBalancer"):
        return (f"Service {ns}/{name} port {port.port} has no nodePort: a {kind} Service gets "
                "one from the API server, but none is set here (set spec.ports[].nodePort, or "
                "the cluster does not allocate one)")
    return (f"Service {ns}/{name} is of type {kind}, which has no nodePort; nodeport mode "
            "needs type NodePort or LoadBalancer")


def mode_warning(service: Service, opts: TranslateOptions,
                 modes: Mapping[Key, str] = NO_MODES) -> str | None:
    """What the Service's mode expects of ``service`` that it lacks, if anything."""
    if (service_mode(service, opts, modes) is BackendMode.NODEPORTLOCAL
            and not opts.npl_enabled_by_controller
            and service.metadata.annotations.get(npl.ENABLED_ANNOTATION) != "true"):
        ns, name = service.key
        return (f"Service {ns}/{name} lacks the annotation {npl.ENABLED_ANNOTATION}: \"true\"; "
                "no NodePortLocal agent maps its pods, so its pool stays empty")
    return None
