"""ingress-nginx ``custom-http-errors`` with ``default-backend`` → the IR's ``ErrorPages``. Pure.

With both keys on an Ingress, ingress-nginx intercepts an answer of its backends whose status
is listed and answers with its default backend's response instead (``error_page CODE =
@custom_…``: the status is the default backend's), asking it for ``/`` with ``X-Code``,
``X-Format``, ``X-Original-URI``, ``X-Namespace``, ``X-Ingress-Name``, ``X-Service-Name``,
``X-Service-Port`` and ``X-Request-ID``. ``default-backend`` names a Service of the Ingress's
namespace, its first port (as ingress-nginx picks it).

Either key alone is not served (ingress-nginx's controller-wide default backend, and the
fallback for a Service without endpoints, have no Podway counterpart): reported, as before. An
unusable value (a code outside 400-599, no such Service) is an error and the Ingress is served
without error pages (nothing it restricts is lost).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from podway.ir import ErrorPages
from podway.ir.route import Filter
from podway.model import Ingress, Service
from podway.model.networking import IngressBackend
from podway.translate.ingress.nginx.basic_auth import Served
from podway.translate.ingress.nginx.values import PREFIX, quote
from podway.translate.pools.backends import http_pool

KEYS = ("custom-http-errors", "default-backend")


def served_keys(raw: Mapping[str, str]) -> frozenset[str]:
    """Both keys, when both are set (neither alone is served)."""
    if all(raw.get(k, "").strip() for k in KEYS):
        return frozenset(PREFIX + k for k in KEYS)
    return frozenset()


def serve(ingress: Ingress, lookup: Callable[[str, str], Service | None]) -> Served:
    annotations, namespace = ingress.metadata.annotations, ingress.metadata.namespace
    raw = {k.removeprefix(PREFIX): v for k, v in annotations.items() if k.startswith(PREFIX)}
    out = Served(ingress, key="custom-http-errors")
    if not served_keys(raw):
        return out
    codes: list[int] = []
    for text in raw["custom-http-errors"].split(","):
        if not text.strip().isdigit() or not 400 <= int(text) <= 599:
            out.errors.append((PREFIX + "custom-http-errors", f"{quote(text.strip())} is not "
                               "a status 400-599; the Ingress is served without error pages"))
            return out
        codes.append(int(text))
    name = raw["default-backend"].strip()
    ns, _, name = name.rpartition("/")
    service = lookup(namespace, name) if ns in ("", namespace) else None
    if service is None or not service.spec.ports:
        out.errors.append((PREFIX + "default-backend", f"Service {namespace}/{name} with a port "
                           "not found; the Ingress is served without error pages"))
        return out
    pool = http_pool(service, service.spec.ports[0])
    out.filter = ErrorPages(codes=tuple(dict.fromkeys(codes)), pool=pool.name,
                            namespace=namespace, ingress=ingress.metadata.name)
    out.pools = (pool,)
    return out


def for_backend(filters: tuple[Filter, ...], backend: IngressBackend | None
                ) -> tuple[Filter, ...]:
    """``filters`` with the error pages naming ``backend``'s Service and port."""
    if backend is None or backend.service is None:
        return filters
    port = backend.service.port
    number = str(port.number) if port and port.number is not None else (
        port.name if port and port.name else "")
    return tuple(replace(f, service=backend.service.name, port=number)
                 if isinstance(f, ErrorPages) else f for f in filters)
