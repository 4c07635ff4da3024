"""The values ``podway.tools.migrate.to_gateway`` works with: its options, its result and notes,
and one HTTPRoute in the making (``HostRoutes``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podway.model import Ingress
from podway.translate.core.nginx_config import NginxConfig
from podway.translate.ingress.nginx.annotations import NginxAnnotations


@dataclass(frozen=True, slots=True, kw_only=True)
class ConvertOptions:
    gateway_name: str = "ingress-nginx"
    gateway_namespace: str = ""  # "": the Ingresses' namespace when they share one, else default
    gateway_class: str = "podway"
    http_port: int = 80
    https_port: int = 443
    # ingress-nginx's ConfigMap (HSTS) the Ingresses were served with
    nginx: NginxConfig = field(default_factory=NginxConfig)


DEFAULTS = ConvertOptions()


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    """Something of ``ingress`` (namespace/name) that was not carried over, and why."""

    ingress: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"Ingress {self.ingress}: {self.key}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversion:
    objects: tuple[dict[str, Any], ...]
    notes: tuple[Note, ...]


@dataclass(slots=True)
class HostRoutes:
    """One HTTPRoute in the making: an Ingress's rules for one hostname."""

    ingress: Ingress
    notes: NginxAnnotations
    host: str
    catch_all: bool = False  # the route without hostname serving the defaultBackend
    alias_of: str = ""  # nginx server-alias: the host whose rules this alias serves
    rules: list[dict[str, Any]] = field(default_factory=list)
    # (match type, value) → rule index, so one path is served once
    by_path: dict[tuple[str, str], int] = field(default_factory=dict)
    # (Ingress pathType, path as written) → rule index, so a canary joins the rule it shadows
    by_source: dict[tuple[str, str], int] = field(default_factory=dict)


def ref_of(ingress: Ingress) -> str:
    return f"{ingress.metadata.namespace}/{ingress.metadata.name}"
