"""Client address settings: trusted X-Forwarded-For hops (L7) and PROXY protocol (L4).

Runs after the structure (listeners and pools) is final, and only sets fields:

* every HTTP/HTTPS listener gets ``xff_trusted_hops`` — the ``--xff-trusted-hops`` flag
  (``TranslateOptions.xff_trusted_hops``, default 0: the engine is the edge), or, on a Gateway's
  listener, the Gateway's ``podway.io/xff-trusted-hops`` annotation (the oldest Gateway's, when
  several share the port). The Ingress listeners are shared by every Ingress, so no Ingress can
  change them: only the flag applies there.
* every TCP pool of a Service annotated ``podway.io/proxy-protocol: v2`` gets
  ``proxy_protocol``. HTTP pools never do: the engine reuses one upstream connection for the
  requests of many clients, so a header per connection cannot name the client (X-Forwarded-For
  and X-Real-IP do that for HTTP).

A value that cannot be used is one ``InvalidAnnotation`` warning, and the default applies.
"""

from __future__ import annotations

from dataclasses import replace

from podway.ir import Listener, ListenerProtocol, PoolProtocol
from podway.model import ObjectRef, Service
from podway.model.gateway import Gateway
from podway.model.snapshot import Snapshot
from podway.translate.backends import PoolSpec
from podway.translate.problems import Problem, Reason, Severity

XFF_ANNOTATION = "podway.io/xff-trusted-hops"
PROXY_ANNOTATION = "podway.io/proxy-protocol"
MAX_HOPS = 16  # more trusted proxies than this in front of one edge is a typo


def parse_hops(value: str) -> int | None:
    """``value`` as a hop count (0..MAX_HOPS), or None when it is not one."""
    text = value.strip()
    if not text.isdigit() or int(text) > MAX_HOPS:
        return None
    return int(text)


def apply_client_ip(snapshot: Snapshot, listeners: list[Listener],
                    pools: dict[str, PoolSpec], default_hops: int
                    ) -> tuple[list[Listener], list[Problem]]:
    """Listeners with their trusted hops; ``pools`` is updated in place (PROXY protocol)."""
    problems: list[Problem] = []
    hops_of: dict[tuple[str, str], int] = {}
    # Only the Gateways we serve: another implementation's Gateway is not ours to warn about.
    served = {(o.namespace, o.name) for listener in listeners for o in listener.origins
              if o.kind == "Gateway"}
    for key in sorted(served):
        gateway = snapshot.get(Gateway, *key)
        value = gateway.metadata.annotations.get(XFF_ANNOTATION) if gateway else None
        if gateway is None or value is None:
            continue
        hops = parse_hops(value)
        if hops is None:
            problems.append(_invalid(gateway.ref, XFF_ANNOTATION, value,
                                     f"a number of hops, 0-{MAX_HOPS}; --xff-trusted-hops "
                                     "applies"))
        else:
            hops_of[gateway.key] = hops
    out: list[Listener] = []
    for listener in listeners:
        if listener.protocol not in (ListenerProtocol.HTTP, ListenerProtocol.HTTPS):
            out.append(listener)
            continue
        hops = next((hops_of[(o.namespace, o.name)] for o in listener.origins
                     if o.kind == "Gateway" and (o.namespace, o.name) in hops_of), default_hops)
        out.append(listener if hops == listener.xff_trusted_hops
                   else replace(listener, xff_trusted_hops=hops))
    services: dict[tuple[str, str], bool] = {}
    http_only: dict[tuple[str, str], ObjectRef] = {}  # asked for PROXY, no TCP pool (yet)
    for name, spec in pools.items():
        if spec.service not in services:
            services[spec.service] = _proxy_protocol(snapshot.get(Service, *spec.service),
                                                     problems)
            if services[spec.service]:
                http_only[spec.service] = spec.origin
        if services[spec.service] and spec.settings.protocol is PoolProtocol.TCP:
            pools[name] = replace(spec, settings=replace(spec.settings, proxy_protocol=True))
            http_only.pop(spec.service, None)
        elif services[spec.service] and spec.settings.protocol is PoolProtocol.UDP:
            http_only.pop(spec.service, None)  # a UDP port: nothing to say, as documented
    for ref in sorted(http_only.values(), key=str):
        problems.append(Problem(
            ref=ref, reason=Reason.INVALID_ANNOTATION, severity=Severity.WARNING,
            field=f"metadata.annotations[{PROXY_ANNOTATION}]",
            message=f"annotation {PROXY_ANNOTATION} applies to TCP pools only (LoadBalancer "
                    "ports, TCPRoute, TLSRoute); this Service is only served over HTTP, where "
                    "the pods get the client in X-Real-IP and X-Forwarded-For"))
    return out, problems


def _proxy_protocol(service: Service | None, problems: list[Problem]) -> bool:
    value = service.metadata.annotations.get(PROXY_ANNOTATION) if service else None
    if value is None or service is None:
        return False
    if value.strip().lower() == "v2":
        return True
    if value.strip().lower() not in ("", "none", "off"):
        problems.append(_invalid(service.ref, PROXY_ANNOTATION, value,
                                 "\"v2\" (or \"none\"); no PROXY header is sent"))
    return False


def _invalid(ref: ObjectRef, annotation: str, value: str, expected: str) -> Problem:
    return Problem(ref=ref, reason=Reason.INVALID_ANNOTATION,
                   message=f"annotation {annotation}: {value[:64]!r} is not {expected}",
                   severity=Severity.WARNING, field=f"metadata.annotations[{annotation}]")
