"""Client address settings: trusted X-Forwarded-For hops (L7), PROXY protocol and transparent
listeners (L4), and what ClientIP affinity cannot honour.

Runs after the structure (listeners and pools) is final, and only sets fields:

* every HTTP/HTTPS listener gets ``xff_trusted_hops`` — the ``--xff-trusted-hops`` flag
  (``TranslateOptions.xff_trusted_hops``, default 0: the engine is the edge), or, on a Gateway's
  listener, the Gateway's ``podway.io/xff-trusted-hops`` annotation (the oldest Gateway's, when
  several share the port). The Ingress listeners are shared by every Ingress, so no Ingress can
  change them: only the flag applies there.
* an HTTP/HTTPS listener gets ``real_ip`` (the engine sets X-Real-IP) with ``--x-real-ip``
  (``TranslateOptions.real_ip_header``), or, without it, when it serves an Ingress and an
  Ingress class is taken over from ingress-nginx (``takeover_classes``), which always sets it.
  Off otherwise: the header is a per-request formatter every request would pay for.
* every TCP pool of a Service annotated ``podway.io/proxy-protocol: v2`` gets
  ``proxy_protocol``. HTTP pools never do: the engine reuses one upstream connection for the
  requests of many clients, so a header per connection cannot name the client (X-Forwarded-For
  and X-Real-IP do that for HTTP).
* a TCP, TLS or UDP listener whose pools all belong to Services annotated
  ``podway.io/client-ip: transparent`` gets ``transparent``: the engine connects to the pods from
  the client's own address. Listener-wide in the engine (Envoy's original-source filter, the UDP
  proxy's ``use_original_src_ip``), so a listener that also forwards to a Service that did not
  opt in stays as it is, and the opted-in Service is told why (``TransparentNotApplied``
  warning) — as it is when it is served only over HTTP (the engine shares upstream connections
  between clients there) or on an HTTPS listener's passthrough routes.
* a Service with ``sessionAffinity: ClientIP`` and a ``timeoutSeconds`` other than Kubernetes'
  default gets an ``AffinityTimeoutNotApplied`` warning: its pools hash on the client address,
  which keeps a client on its member for as long as the member stays, with no idle expiry (no
  engine balancer remembers clients for a time). The default (10800 s, which the API server
  fills in for every ClientIP Service) is not warned about: it asks for long stickiness.

A value that cannot be used is one ``InvalidAnnotation`` warning, and the default applies.
"""

from __future__ import annotations

from dataclasses import replace

from podway.ir import Listener, ListenerProtocol, PoolProtocol
from podway.model import ObjectRef, Service
from podway.model.gateway import Gateway
from podway.model.snapshot import Snapshot
from podway.translate import annotations as ann
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.pools.backends import PoolSpec
from podway.translate.pools.traffic_values import CLIENT_IP_DEFAULT_TIMEOUT_S

_L4 = (ListenerProtocol.TCP, ListenerProtocol.TLS, ListenerProtocol.UDP)  # can be transparent


def parse_hops(value: str) -> int | None:
    """``value`` as a hop count (0..``annotations.MAX_HOPS``), or None when it is not one."""
    try:
        return ann.hops(value)
    except ValueError:
        return None


def apply_client_ip(snapshot: Snapshot, listeners: list[Listener],
                    pools: dict[str, PoolSpec], default_hops: int, *,
                    real_ip: bool = False, nginx_ingress: bool = False
                    ) -> tuple[list[Listener], list[Problem]]:
    """Listeners with their trusted hops; ``pools`` is updated in place (PROXY protocol)."""
    problems: list[Problem] = []
    hops_of: dict[tuple[str, str], int] = {}
    # Only the Gateways we serve: another implementation's Gateway is not ours to warn about.
    served = {(o.namespace, o.name) for listener in listeners for o in listener.origins
              if o.kind == "Gateway"}
    for key in sorted(served):
        gateway = snapshot.get(Gateway, *key)
        value = gateway.metadata.annotations.get(ann.XFF_TRUSTED_HOPS.name) if gateway else None
        if gateway is None or value is None:
            continue
        hops = parse_hops(value)
        if hops is None:
            problems.append(_invalid(gateway.ref, ann.XFF_TRUSTED_HOPS.name, value,
                                     f"a number of hops, 0-{ann.MAX_HOPS}; --xff-trusted-hops "
                                     "applies"))
        else:
            hops_of[gateway.key] = hops
    out = [_l7_settings(listener, hops_of, default_hops, real_ip=real_ip,
                        nginx_ingress=nginx_ingress) for listener in listeners]
    services: dict[tuple[str, str], bool] = {}
    http_only: dict[tuple[str, str], ObjectRef] = {}  # asked for PROXY, no TCP pool (yet)
    transparent: dict[tuple[str, str], ObjectRef] = {}  # asked for the client's own address
    for name, spec in pools.items():
        if spec.service not in services:
            service = snapshot.get(Service, *spec.service)
            services[spec.service] = _proxy_protocol(service, problems)
            if services[spec.service]:
                http_only[spec.service] = spec.origin
            if service is not None:
                if _transparent(service, problems):
                    transparent[spec.service] = service.ref
                _affinity_timeout(service, problems)
        if services[spec.service] and spec.settings.protocol is PoolProtocol.TCP:
            pools[name] = replace(spec, settings=replace(spec.settings, proxy_protocol=True))
            http_only.pop(spec.service, None)
        elif services[spec.service] and spec.settings.protocol is PoolProtocol.UDP:
            http_only.pop(spec.service, None)  # a UDP port: nothing to say, as documented
    for ref in sorted(http_only.values(), key=str):
        problems.append(Problem(
            ref=ref, reason=Reason.INVALID_ANNOTATION, severity=Severity.WARNING,
            field=f"metadata.annotations[{ann.PROXY_PROTOCOL.name}]",
            message=f"annotation {ann.PROXY_PROTOCOL.name} applies to TCP pools only (LoadBalancer "
                    "ports, TCPRoute, TLSRoute); this Service is only served over HTTP, where "
                    "the pods get the client in X-Real-IP and X-Forwarded-For"))
    if transparent:
        out = _apply_transparent(out, pools, transparent, problems)
    return out, problems


def _l7_settings(listener: Listener, hops_of: dict[tuple[str, str], int], default_hops: int,
                 *, real_ip: bool, nginx_ingress: bool) -> Listener:
    """An HTTP/HTTPS listener with its trusted hops (its Gateway's, else the flag's) and
    whether it sets X-Real-IP (asked for, or an Ingress listener of a taken-over class)."""
    if listener.protocol not in (ListenerProtocol.HTTP, ListenerProtocol.HTTPS):
        return listener
    hops = next((hops_of[(o.namespace, o.name)] for o in listener.origins
                 if o.kind == "Gateway" and (o.namespace, o.name) in hops_of), default_hops)
    header = real_ip or (nginx_ingress and any(o.kind == "Ingress" for o in listener.origins))
    if (hops, header) == (listener.xff_trusted_hops, listener.real_ip):
        return listener
    return replace(listener, xff_trusted_hops=hops, real_ip=header)


def _apply_transparent(listeners: list[Listener], pools: dict[str, PoolSpec],
                       wanted: dict[tuple[str, str], ObjectRef], problems: list[Problem]
                       ) -> list[Listener]:
    """``transparent`` on each TCP/TLS/UDP listener whose every pool's Service is in ``wanted``;
    one ``TransparentNotApplied`` warning per opted-in Service and cause otherwise."""
    why: dict[tuple[ObjectRef, str], None] = {}  # ordered set of (Service, message)
    out: list[Listener] = []
    for listener in listeners:
        used = {b.pool: pools[b.pool] for r in listener.l4_routes for b in r.backends
                if b.pool and b.weight > 0 and b.pool in pools}
        mine = {s.service for s in used.values() if s.service in wanted}
        if not mine:
            out.append(listener)
            continue
        others = sorted({s.service for s in used.values()} - mine)
        if listener.protocol not in _L4:
            reason = (f"listener {listener.name} is HTTPS: only TCP, TLS and UDP listeners are "
                      "served transparently")
        elif others:
            reason = (f"listener {listener.name} also forwards to Service "
                      f"{others[0][0]}/{others[0][1]}, which did not opt in (the engine sets "
                      "the source address per listener)")
        else:
            out.append(listener if listener.transparent
                       else replace(listener, transparent=True))
            continue
        for key in sorted(mine):
            why[(wanted[key], reason)] = None
        out.append(listener)
    l4 = {s.service for s in pools.values()
          if s.settings.protocol in (PoolProtocol.TCP, PoolProtocol.UDP)}
    for key, ref in sorted(wanted.items()):
        if key not in l4:
            why[(ref, "this Service is only served over HTTP, where the pods get the client "
                      "in X-Real-IP and X-Forwarded-For")] = None
    for ref, reason in why:
        problems.append(Problem(
            ref=ref, reason=Reason.TRANSPARENT_NOT_APPLIED, severity=Severity.WARNING,
            field=f"metadata.annotations[{ann.CLIENT_IP.name}]",
            message=f"{ann.CLIENT_IP.name}: transparent is not applied: {reason}"))
    return out


def _transparent(service: Service, problems: list[Problem]) -> bool:
    value = service.metadata.annotations.get(ann.CLIENT_IP.name)
    if value is None:
        return False
    text = value.strip().lower()
    if text == "transparent":
        return True
    if text not in ("", "none"):
        problems.append(_invalid(service.ref, ann.CLIENT_IP.name, value,
                                 "\"transparent\" (or \"none\"); the pods see the engine's "
                                 "address"))
    return False


def _affinity_timeout(service: Service, problems: list[Problem]) -> None:
    if service.spec.session_affinity != "ClientIP":
        return
    config = service.spec.session_affinity_config
    timeout = config.client_ip.timeout_seconds if config and config.client_ip else None
    if timeout is None or timeout == CLIENT_IP_DEFAULT_TIMEOUT_S:
        return
    problems.append(Problem(
        ref=service.ref, reason=Reason.AFFINITY_TIMEOUT_NOT_APPLIED, severity=Severity.WARNING,
        field="spec.sessionAffinityConfig.clientIP.timeoutSeconds",
        message=f"timeoutSeconds {timeout} is not applied: the engine hashes on the client "
                "address, so a client stays on its member for as long as that member stays, "
                "however long it is idle"))


def _proxy_protocol(service: Service | None, problems: list[Problem]) -> bool:
    value = service.metadata.annotations.get(ann.PROXY_PROTOCOL.name) if service else None
    if value is None or service is None:
        return False
    if value.strip().lower() == "v2":
        return True
    if value.strip().lower() not in ("", "none", "off"):
        problems.append(_invalid(service.ref, ann.PROXY_PROTOCOL.name, value,
                                 "\"v2\" (or \"none\"); no PROXY header is sent"))
    return False


def _invalid(ref: ObjectRef, annotation: str, value: str, expected: str) -> Problem:
    return Problem(ref=ref, reason=Reason.INVALID_ANNOTATION,
                   message=f"annotation {annotation}: {value[:64]!r} is not {expected}",
                   severity=Severity.WARNING, field=f"metadata.annotations[{annotation}]")
