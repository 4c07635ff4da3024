"""Every ``podway.io/`` annotation, declared once: its name, the kinds it applies to, how its value
parses, its default and where ``docs/reference.md`` explains it.

The modules that read an annotation take its name (and, where they judge a value alone, its
parser) from here; ``tests/unit/translate/test_annotations.py`` checks that ``docs/reference.md``
lists exactly these annotations and that no other module spells a ``podway.io/`` key itself.
Other controllers' annotations (ingress-nginx's, which Podway honours when it takes their
Ingresses over) are not Podway's: they stay in ``translate/ingress/foreign.py``.

A parser takes the annotation's text and returns its value, or raises ``ValueError`` with a
message that says what was expected. Whether a bad value is an error or a warning, and what
applies instead, is for the feature that reads it (its docstring and the reference say).

Two names are declared in the model, which reads them and sits below this layer:
``podway.io/engine-group`` in ``podway.model.base`` (``K8sObject.engine_group``) and
``podway.io/npl-signature`` in ``podway.model.npl`` (the agent's vouching for a NodePortLocal
mapping). They are registered here like the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from podway.model.base import ENGINE_GROUP as _ENGINE_GROUP_KEY
from podway.model.npl import SIGNATURE_ANNOTATION as _NPL_SIGNATURE_KEY
from podway.translate.core.options import BackendMode

PREFIX = "podway.io/"
MAX_HOPS = 16  # more trusted proxies than this in front of one edge is a typo
_DURATION = re.compile(r"^(\d+(h|ms|m|s))+$")

Parser = Callable[[str], object]


@dataclass(frozen=True, slots=True, kw_only=True)
class Annotation:
    """One ``podway.io/`` annotation."""

    name: str  # the whole key, ``podway.io/...``
    kinds: tuple[str, ...]  # the kinds it is read on
    parse: Parser  # text → value; ValueError: not a value of this annotation
    default: str  # what applies when it is unset, as the reference says it
    doc: str  # the section of docs/reference.md that explains it (an anchor)
    written_by: str = ""  # "controller": Podway writes it, users do not

    @property
    def short(self) -> str:
        """The name without ``podway.io/`` (``retries``)."""
        return self.name.removeprefix(PREFIX)

    @property
    def field(self) -> str:
        """Where a problem with it points: ``metadata.annotations[podway.io/...]``."""
        return f"metadata.annotations[{self.name}]"


# --- parsers --------------------------------------------------------------------------------------

def boolean(text: str) -> bool:
    """``"true"`` or ``"false"`` (any case, surrounding blanks ignored)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError('not "true" or "false"')
    return value == "true"


def one_of(*choices: str) -> Parser:
    """One of ``choices``, case-insensitive; the value as the choice is spelled."""
    by_lower = {c.lower(): c for c in choices}

    def parse(text: str) -> str:
        found = by_lower.get(text.strip().lower())
        if found is None:
            raise ValueError(f"not one of {', '.join(choices)}")
        return found
    return parse


def whole(text: str) -> int:
    """A whole number (at most six digits)."""
    value = text.strip()
    if not value.isdigit() or len(value) > 6:
        raise ValueError("not a whole number")
    return int(value)


def hops(text: str) -> int:
    """A number of trusted proxy hops, 0 to ``MAX_HOPS``."""
    value = text.strip()
    if not value.isdigit() or int(value) > MAX_HOPS:
        raise ValueError(f"not a number of hops, 0-{MAX_HOPS}")
    return int(value)


def duration(text: str) -> str:
    """``1h2m3s4ms``-style; the text as written (the traffic settings convert it)."""
    value = text.strip()
    if not _DURATION.match(value):
        raise ValueError("not a duration like 1h2m3s4ms")
    return value


def text(value: str) -> str:
    """Any non-empty text (the feature judges it further)."""
    if not value.strip():
        raise ValueError("empty")
    return value.strip()


def backend_mode(value: str) -> BackendMode:
    """A backend mode, as written (``clusterip``, ``nodeport``, ``nodeportlocal``)."""
    try:
        return BackendMode(value)
    except ValueError:
        raise ValueError(f"not a backend mode (one of {', '.join(BackendMode)})") from None


# --- the registry -----------------------------------------------------------------------------

REGISTRY: dict[str, Annotation] = {}


def _add(short: str, *, kinds: tuple[str, ...], parse: Parser, default: str, doc: str,
         written_by: str = "") -> Annotation:
    entry = Annotation(name=PREFIX + short, kinds=kinds, parse=parse, default=default, doc=doc,
                       written_by=written_by)
    assert entry.name not in REGISTRY, entry.name  # one declaration per name
    REGISTRY[entry.name] = entry
    return entry


_INGRESS = ("Ingress",)
_SERVICE = ("Service",)
_POOL = ("Service", "Ingress")  # traffic settings: on the Service, or on an Ingress for its own
_ADDRESSED = ("Service", "Gateway")  # objects that get a VIP

# TLS and protocols of an Ingress (translate/ingress/tls.py, translate/core/tls_options.py)
_TLS_DOC = "tls-and-protocols"
SSL_REDIRECT = _add("ssl-redirect", kinds=_INGRESS, parse=boolean, default="true", doc=_TLS_DOC)
TLS_PASSTHROUGH = _add("tls-passthrough", kinds=_INGRESS, parse=boolean, default="false",
                       doc=_TLS_DOC)
TLS_MIN_VERSION = _add("tls-min-version", kinds=_INGRESS, parse=text,
                       default="--tls-min-version", doc=_TLS_DOC)
TLS_MAX_VERSION = _add("tls-max-version", kinds=_INGRESS, parse=text,
                       default="--tls-max-version", doc=_TLS_DOC)
TLS_CIPHERS = _add("tls-ciphers", kinds=_INGRESS, parse=text, default="--tls-ciphers",
                   doc=_TLS_DOC)
BACKEND_PROTOCOL = _add("backend-protocol", kinds=_INGRESS,
                        parse=one_of("HTTP", "H2C", "GRPC", "HTTPS", "GRPCS"),
                        default="the Service port's appProtocol, else HTTP", doc=_TLS_DOC)
BACKEND_CA_SECRET = _add("backend-ca-secret", kinds=_INGRESS, parse=text,
                         default="the engine host's trust store", doc=_TLS_DOC)
BACKEND_SNI = _add("backend-sni", kinds=_INGRESS, parse=text,
                   default="<service>.<namespace>.svc", doc=_TLS_DOC)

# Health, balancing, persistence, timeouts, retries (translate/pools/traffic_values.py)
_TRAFFIC_DOC = "annotations"
LB_ALGORITHM = _add("lb-algorithm", kinds=_POOL, parse=text, default="round-robin",
                    doc=_TRAFFIC_DOC)
HASH_ON = _add("hash-on", kinds=_POOL, parse=text, default="none", doc=_TRAFFIC_DOC)
AFFINITY = _add("affinity", kinds=_POOL, parse=one_of("cookie", "client-ip", "source-ip", "none"),
                default="none", doc=_TRAFFIC_DOC)
AFFINITY_COOKIE = _add("affinity-cookie", kinds=_POOL, parse=text, default="podway-session",
                       doc=_TRAFFIC_DOC)
AFFINITY_TTL = _add("affinity-ttl", kinds=_POOL, parse=duration, default="none",
                    doc=_TRAFFIC_DOC)
HEALTH_CHECK = _add("health-check", kinds=_POOL, parse=text,
                    default="fitting the protocol", doc=_TRAFFIC_DOC)
HEALTH_CHECK_PATH = _add("health-check-path", kinds=_POOL, parse=text, default="none",
                         doc=_TRAFFIC_DOC)
HEALTH_CHECK_HOST = _add("health-check-host", kinds=_POOL, parse=text,
                         default="<service>.<namespace>.svc", doc=_TRAFFIC_DOC)
HEALTH_CHECK_STATUSES = _add("health-check-statuses", kinds=_POOL, parse=text,
                             default="200-499 (200-399 with a path)", doc=_TRAFFIC_DOC)
HEALTH_CHECK_INTERVAL = _add("health-check-interval", kinds=_POOL, parse=duration,
                             default="5s", doc=_TRAFFIC_DOC)
HEALTH_CHECK_TIMEOUT = _add("health-check-timeout", kinds=_POOL, parse=duration,
                            default="1s", doc=_TRAFFIC_DOC)
HEALTHY_THRESHOLD = _add("healthy-threshold", kinds=_POOL, parse=whole, default="1",
                         doc=_TRAFFIC_DOC)
UNHEALTHY_THRESHOLD = _add("unhealthy-threshold", kinds=_POOL, parse=whole, default="3",
                           doc=_TRAFFIC_DOC)
OUTLIER_DETECTION = _add("outlier-detection", kinds=_POOL, parse=text, default="5",
                         doc=_TRAFFIC_DOC)
CONNECT_TIMEOUT = _add("connect-timeout", kinds=_POOL, parse=duration, default="5s",
                       doc=_TRAFFIC_DOC)
REQUEST_TIMEOUT = _add("request-timeout", kinds=_POOL, parse=duration, default="the engine's",
                       doc=_TRAFFIC_DOC)
IDLE_TIMEOUT = _add("idle-timeout", kinds=_POOL, parse=duration, default="the engine's",
                    doc=_TRAFFIC_DOC)
RETRIES = _add("retries", kinds=_POOL, parse=whole, default="0", doc=_TRAFFIC_DOC)
RETRY_ON = _add("retry-on", kinds=_POOL, parse=text, default="5xx,reset",
                doc=_TRAFFIC_DOC)
RETRY_BUDGET = _add("retry-budget", kinds=_POOL, parse=text, default="none (10 retries in flight)",
                    doc=_TRAFFIC_DOC)
RETRY_BUDGET_MIN = _add("retry-budget-min-concurrent", kinds=_POOL, parse=whole, default="3",
                        doc=_TRAFFIC_DOC)
TRAFFIC = (LB_ALGORITHM, HASH_ON, AFFINITY, AFFINITY_COOKIE, AFFINITY_TTL, HEALTH_CHECK,
           HEALTH_CHECK_PATH, HEALTH_CHECK_HOST, HEALTH_CHECK_STATUSES, HEALTH_CHECK_INTERVAL,
           HEALTH_CHECK_TIMEOUT, HEALTHY_THRESHOLD, UNHEALTHY_THRESHOLD, OUTLIER_DETECTION,
           CONNECT_TIMEOUT, REQUEST_TIMEOUT, IDLE_TIMEOUT, RETRIES, RETRY_ON, RETRY_BUDGET,
           RETRY_BUDGET_MIN)

# The client's address (translate/pools/client_ip.py)
_CLIENT_DOC = "client-address"
XFF_TRUSTED_HOPS = _add("xff-trusted-hops", kinds=("Gateway",), parse=hops,
                        default="--xff-trusted-hops", doc=_CLIENT_DOC)
PROXY_PROTOCOL = _add("proxy-protocol", kinds=_SERVICE, parse=one_of("v2", "none"),
                      default="none", doc=_CLIENT_DOC)
CLIENT_IP = _add("client-ip", kinds=_SERVICE, parse=one_of("transparent", "none"),
                 default="none", doc=_CLIENT_DOC)

# The engine of an L4 listener (translate/pools/engine_choice.py)
ENGINE = _add("engine", kinds=_SERVICE, parse=one_of("kernel", "envoy"),
              default="envoy", doc="engine")

# Backend modes (translate/pools/backends.py, programs/controller/modes.py)
BACKEND_MODE = _add("backend-mode", kinds=_SERVICE, parse=backend_mode,
                    default="--backend-mode", doc="backend-modes")
NPL_MANAGED = _add("npl-managed", kinds=_SERVICE, parse=boolean, default="unset",
                   doc="backend-modes", written_by="controller")
# Declared in podway.model.npl (the mapping's codec checks it), registered here like the others.
NPL_SIGNATURE = _add(_NPL_SIGNATURE_KEY.removeprefix(PREFIX), kinds=("Pod",), parse=text,
                     default="unset", doc="backend-modes", written_by="agent")

# VIP addresses (programs/ipam/claims.py), engine groups (programs/controller/groups.py)
_VIP_DOC = "vip-addresses-with-podway-controller---vip-pools"
VIP = _add("vip", kinds=_ADDRESSED, parse=text,
           default="spec.loadBalancerIP, Gateway spec.addresses, else automatic", doc=_VIP_DOC)
VIP_POOL = _add("vip-pool", kinds=_ADDRESSED, parse=text,
                default="the pools of the engine group", doc=_VIP_DOC)
ENGINE_GROUP = _add(_ENGINE_GROUP_KEY.removeprefix(PREFIX), kinds=_ADDRESSED, parse=text,
                    default="default", doc=_VIP_DOC)
ALLOW_SHARED_VIP = _add("allow-shared-vip", kinds=_ADDRESSED, parse=text, default="no sharing",
                        doc=_VIP_DOC)

# ``podway.io/`` keys that are not annotations (the reference names them too): condition types,
# class controller names, the TrafficPolicy API version, the loadBalancerClass.
OTHER_KEYS: dict[str, str] = {
    PREFIX + "lb-ready": "readiness gate condition type on Pods",
    PREFIX + "VIPAllocated": "condition type on Services",
    PREFIX + "Programmed": "condition type on Services (the engines took its listeners)",
    PREFIX + "gateway-controller": "GatewayClass controllerName",
    PREFIX + "ingress-controller": "IngressClass controller",
    PREFIX + "lb": "Service loadBalancerClass",
    PREFIX + "v1alpha1": "apiVersion of TrafficPolicy",
    PREFIX + "npl-key": "CertificateSigningRequest signerName: an agent asks for its node's key",
    PREFIX + "engine-client": "CertificateSigningRequest signerName: an engine's certificate",
    PREFIX + "npl-key-sealed": "on such a request: the node's key, sealed to the requester",
    PREFIX + "npl-key-refused": "on such a request: why the controller refused it",
    PREFIX + "edge": "Node label: the chart's default engine group runs on nodes that carry it",
}


def by_short(short: str) -> Annotation:
    """``retries`` → the ``podway.io/retries`` entry (KeyError: no such annotation)."""
    return REGISTRY[PREFIX + short]
