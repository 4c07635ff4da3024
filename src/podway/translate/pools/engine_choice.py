"""Which engine serves each L4 listener: ``podway.io/engine`` on the Services behind it.

Runs after the client-address step (``client_ip``), when listeners and pool settings are final,
and only sets ``Listener.engine``:

* a TCP or UDP listener whose every pool belongs to a Service annotated
  ``podway.io/engine: kernel`` is served by the kernel engine (nftables DNAT,
  ``podway.kernel``) — when it needs nothing a proxy does (``podway.ir.engines``);
* otherwise it stays with the proxy engine (Envoy, or HAProxy for its group), and each
  Service that asked for the kernel is told why in one
  ``UnsupportedValue`` warning naming the feature (TLS, PROXY protocol, HTTP, a listener shared
  with a Service that did not ask): never silently different serving;
* no annotation: the default engine (``TranslateOptions.l4_engine``: Envoy, or the kernel
  with ``podway run --engine kernel``, then without warnings for what it cannot serve: the
  Service asked for nothing); ``envoy`` opts out of a kernel default; any other value is an
  ``InvalidAnnotation`` warning and the default applies.
"""

from __future__ import annotations

from dataclasses import replace

from podway.ir import EngineKind, Forward, Listener
from podway.ir.engines import kernel_unsupported
from podway.model import ObjectRef, Service
from podway.model.snapshot import Snapshot
from podway.translate import annotations as ann
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.pools.backends import PoolSpec

ENGINE_ANNOTATION = ann.ENGINE.name
_FIELD = ann.ENGINE.field


def apply_engine(snapshot: Snapshot, listeners: list[Listener], pools: dict[str, PoolSpec],
                 default: EngineKind = EngineKind.ENVOY
                 ) -> tuple[list[Listener], list[Problem]]:
    """Listeners with the engine their Services chose, ``default`` for those that name none
    (module docstring)."""
    problems: list[Problem] = []
    wanted: dict[tuple[str, str], ObjectRef] = {}  # Services that asked for the kernel
    implied: set[tuple[str, str]] = set()  # ... by naming no engine, with the kernel default
    for key in sorted({spec.service for spec in pools.values()}):
        service = snapshot.get(Service, *key)
        if service is None:
            continue
        asked = _asks(service, problems)
        if asked == EngineKind.KERNEL or (asked is None and default == EngineKind.KERNEL):
            wanted[key] = service.ref
            if asked is None:
                implied.add(key)
    if not wanted:
        return listeners, problems
    why: dict[tuple[ObjectRef, str], None] = {}  # ordered set of (Service, reason)
    out: list[Listener] = []
    for listener in listeners:
        used = {b.pool: pools[b.pool] for r in listener.l4_routes for b in r.backends
                if b.pool and b.pool in pools}
        for vh in listener.virtual_hosts:
            for route in vh.routes:
                if isinstance(route.action, Forward):
                    used |= {b.pool: pools[b.pool] for b in route.action.backends
                             if b.pool and b.pool in pools}
        mine = {s.service for s in used.values() if s.service in wanted}
        if not mine:
            out.append(listener)
            continue
        others = sorted({s.service for s in used.values()} - mine)
        reason = kernel_unsupported(listener, ((n, s.settings) for n, s in used.items()))
        if reason is None and others:
            reason = (f"it also forwards to Service {others[0][0]}/{others[0][1]}, which did "
                      "not ask for the kernel engine")
        if reason is None:
            out.append(replace(listener, engine=EngineKind.KERNEL))
            continue
        for key in sorted(mine - implied):  # only a Service that named the kernel is told
            why[(wanted[key], f"listener {listener.name}: {reason}")] = None
        out.append(listener)
    for ref, reason in why:
        problems.append(Problem(
            ref=ref, reason=Reason.UNSUPPORTED_VALUE, severity=Severity.WARNING, field=_FIELD,
            message=f"{ENGINE_ANNOTATION}: kernel cannot serve {reason}; "
                    "the proxy engine of its group (Envoy or HAProxy) serves it"))
    return out, problems


def _asks(service: Service, problems: list[Problem]) -> EngineKind | None:
    """The engine ``service`` names (None: none, or a value that is not one)."""
    value = service.metadata.annotations.get(ENGINE_ANNOTATION)
    if value is None or not value.strip():
        return None
    text = value.strip().lower()
    if text in (EngineKind.KERNEL, EngineKind.ENVOY):
        return EngineKind(text)
    problems.append(Problem(
        ref=service.ref, reason=Reason.INVALID_ANNOTATION, severity=Severity.WARNING,
        field=_FIELD, message=f"annotation {ENGINE_ANNOTATION}: {value[:64]!r} is not "
                              "\"kernel\" or \"envoy\"; the default engine serves it"))
    return None
