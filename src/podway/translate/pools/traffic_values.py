"""Traffic settings as written (a TrafficPolicy section, ``podway.io/`` annotations, Gateway API
fields) → IR values, with one problem per bad value.

Every source of health, balancing, persistence, timeout and retry settings goes through these
functions, so the same words mean the same thing everywhere (``docs/reference.md``). A bad value
never raises: it becomes an ``Issue`` (reason, message, field) and the section it is in is left
out, so the next source in precedence (or the default) applies instead.

``annotation_spec`` turns ``podway.io/`` annotations into the same ``TrafficPolicySpec`` a policy
holds; from there on an annotation and a policy are indistinguishable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from podway.ir import (
    HealthCheck,
    HealthCheckKind,
    LBPolicy,
    OutlierDetection,
    Persistence,
    PersistenceKind,
    PoolProtocol,
    RetryBudget,
    RetryOn,
    RetryPolicy,
)
from podway.model.policy import (
    HealthCheckSpec,
    LoadBalancerSpec,
    OutlierDetectionSpec,
    PersistenceSpec,
    RetryBudgetSpec,
    RetrySpec,
    SessionPersistence,
    TimeoutsSpec,
    TrafficPolicySpec,
)
from podway.translate import annotations as ann
from podway.translate.core.problems import Reason, quote
from podway.translate.pools.traffic_defaults import DEFAULT_OUTLIER_DETECTION, default_health_check

DEFAULT_COOKIE = "podway-session"
CLIENT_IP_DEFAULT_TIMEOUT_S = 10_800  # Kubernetes' sessionAffinityConfig default (3 hours)

_DURATION = re.compile(r"^(\d+(h|ms|m|s))+$")
_DURATION_PART = re.compile(r"(\d+)(h|ms|m|s)")
_UNIT_MS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,256}$")
_COOKIE_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,256}$")
_PATH = re.compile(r"^/[\x21-\x7e]{0,1023}$")
_HOST = re.compile(r"^[A-Za-z0-9.:\[\]-]{1,253}$")
MAX_MS = 365 * 24 * 3_600_000  # a year: beyond it a duration is a mistake, not a setting

_LB_NAMES = {
    "roundrobin": LBPolicy.ROUND_ROBIN, "leastrequest": LBPolicy.LEAST_REQUEST,
    "random": LBPolicy.RANDOM, "ringhash": LBPolicy.RING_HASH, "maglev": LBPolicy.MAGLEV,
}
_PERSISTENCE_NAMES = {"cookie": PersistenceKind.COOKIE, "header": PersistenceKind.HEADER,
                      "sourceip": PersistenceKind.SOURCE_IP, "clientip": PersistenceKind.SOURCE_IP}
_CHECK_NAMES = {"tcp": HealthCheckKind.TCP, "http": HealthCheckKind.HTTP,
                "grpc": HealthCheckKind.GRPC}
_RETRY_NAMES = {"5xx": RetryOn.SERVER_ERROR, "gateway-error": RetryOn.GATEWAY_ERROR,
                "reset": RetryOn.RESET}


@dataclass(frozen=True, slots=True)
class Issue:
    """One bad value: where (dotted, relative to the source) and why."""

    reason: Reason
    message: str
    field: str


@dataclass(slots=True)
class Issues:
    found: list[Issue] = field(default_factory=list)

    def add(self, where: str, message: str, reason: Reason = Reason.UNSUPPORTED_VALUE) -> None:
        self.found.append(Issue(reason, message, where))


def _key(text: str) -> str:
    return text.replace("-", "").replace("_", "").lower()


def duration_ms(text: str, where: str, issues: Issues) -> int | None:
    """``1h2m3s4ms`` → milliseconds, or None (and an issue) when malformed or absurd."""
    if not _DURATION.match(text):
        issues.add(where, f"duration {quote(text)} is not like 1h2m3s4ms")
        return None
    value = sum(int(n) * _UNIT_MS[u] for n, u in _DURATION_PART.findall(text))
    if value > MAX_MS:
        issues.add(where, f"duration {quote(text)} is longer than a year")
        return None
    return value


def _bounded(value: int | None, low: int, high: int, where: str, issues: Issues) -> int | None:
    if value is None:
        return None
    if not low <= value <= high:
        issues.add(where, f"{value} is not between {low} and {high}")
        return None
    return value


# --- sections -----------------------------------------------------------------------------------

def health_check(spec: HealthCheckSpec, *, protocol: PoolProtocol, host: str, where: str,
                 issues: Issues) -> HealthCheck | None:
    """A ``healthCheck`` section → a check; None when disabled. Unset fields: the defaults of
    ``HealthCheck``; an unset ``type`` is HTTP when a path is given, else the protocol default."""
    before = len(issues.found)
    if protocol is PoolProtocol.UDP:
        return None
    kind = _check_kind(spec, protocol=protocol, host=host, where=where, issues=issues)
    if kind is None:
        return None
    host = host if kind is not HealthCheckKind.TCP else ""
    # A section that only tunes timing (no type, path or service) keeps the default probe: on
    # an h2c or gRPC pool a bare ``GET /`` would take every grpcio member out.
    default = default_health_check(protocol, host)
    untyped = spec.type is None and spec.path is None and spec.grpc_service is None
    base = (default if untyped and default is not None and default.kind is kind
            else HealthCheck(kind=kind, host=host))
    interval = duration_ms(spec.interval, f"{where}.interval", issues) if spec.interval else None
    timeout = duration_ms(spec.timeout, f"{where}.timeout", issues) if spec.timeout else None
    interval = _bounded(interval, 100, 3_600_000, f"{where}.interval", issues)
    timeout = _bounded(timeout, 10, 600_000, f"{where}.timeout", issues)
    healthy = _bounded(spec.healthy_threshold, 1, 100, f"{where}.healthyThreshold", issues)
    unhealthy = _bounded(spec.unhealthy_threshold, 1, 100, f"{where}.unhealthyThreshold",
                         issues)
    path = base.http_path
    if spec.path is not None:
        if _PATH.match(spec.path):
            path = spec.path
        else:
            issues.add(f"{where}.path", f"path {quote(spec.path)} must start with '/' and hold "
                       "no spaces or control characters")
    check_host = host
    if spec.host is not None:
        if _HOST.match(spec.host):
            check_host = spec.host
        else:
            issues.add(f"{where}.host", f"host {quote(spec.host)} is not a host name")
    expected = base.expected
    if spec.expected_statuses:
        expected = _statuses(spec.expected_statuses, f"{where}.expectedStatuses", issues)
    grpc_service = spec.grpc_service or ""
    if len(issues.found) > before:
        return None
    out = HealthCheck(kind=kind, host=check_host, http_path=path, expected=expected,
                      grpc_service=grpc_service, method=base.method, headers=base.headers,
                      interval_ms=interval or base.interval_ms,
                      timeout_ms=timeout or base.timeout_ms,
                      healthy_threshold=healthy or base.healthy_threshold,
                      unhealthy_threshold=unhealthy or base.unhealthy_threshold)
    if out.timeout_ms > out.interval_ms:
        issues.add(f"{where}.timeout", f"timeout ({out.timeout_ms} ms) is longer than the "
                   f"interval ({out.interval_ms} ms)")
        return None
    return out


def _check_kind(spec: HealthCheckSpec, *, protocol: PoolProtocol, host: str, where: str,
                issues: Issues) -> HealthCheckKind | None:
    """The check's type: as given, else HTTP for a path, gRPC for a service, else the pool's
    default; None (and an issue) when unknown or when the pool cannot carry it."""
    if spec.type is not None:
        kind = _CHECK_NAMES.get(_key(spec.type))
        if kind is None:
            issues.add(f"{where}.type", f"health check type {quote(spec.type)} is not one of "
                       "TCP, HTTP, GRPC")
            return None
    elif spec.path is not None:
        kind = HealthCheckKind.HTTP
    elif spec.grpc_service is not None:
        kind = HealthCheckKind.GRPC
    else:
        default = default_health_check(protocol, host)
        kind = default.kind if default is not None else HealthCheckKind.TCP
    if kind is not HealthCheckKind.TCP and protocol is PoolProtocol.TCP:
        issues.add(f"{where}.type", f"a {kind.value.upper()} check needs an HTTP backend; this "
                   "pool carries TCP (the check would always fail)")
        return None
    return kind


def _statuses(values: tuple[str | int, ...], where: str, issues: Issues
              ) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for i, value in enumerate(values):
        text = str(value).strip()
        low, sep, high = text.partition("-")
        if not (low.isdigit() and (not sep or high.isdigit())):
            issues.add(f"{where}[{i}]", f"{quote(text)} is not a status or a range like 200-399")
            continue
        start, end = int(low), int(high) if sep else int(low)
        if not 100 <= start <= end <= 599:
            issues.add(f"{where}[{i}]", f"{quote(text)} is not within 100-599")
            continue
        out.append((start, end))
    return tuple(out)


def outlier_detection(spec: OutlierDetectionSpec, *, where: str, issues: Issues
                      ) -> OutlierDetection | None:
    before = len(issues.found)
    base = DEFAULT_OUTLIER_DETECTION
    errors = _bounded(spec.consecutive_errors, 1, 1000, f"{where}.consecutiveErrors", issues)
    interval = (duration_ms(spec.interval, f"{where}.interval", issues)
                if spec.interval else None)
    ejection = (duration_ms(spec.base_ejection_time, f"{where}.baseEjectionTime", issues)
                if spec.base_ejection_time else None)
    interval = _bounded(interval, 100, 3_600_000, f"{where}.interval", issues)
    ejection = _bounded(ejection, 100, 86_400_000, f"{where}.baseEjectionTime", issues)
    percent = _bounded(spec.max_ejection_percent, 0, 100, f"{where}.maxEjectionPercent", issues)
    if len(issues.found) > before:
        return None
    return OutlierDetection(
        consecutive_errors=errors or base.consecutive_errors,
        interval_ms=interval or base.interval_ms,
        base_ejection_ms=ejection or base.base_ejection_ms,
        max_ejection_percent=percent if percent is not None else base.max_ejection_percent)


def retry_budget(spec: RetryBudgetSpec, *, where: str, issues: Issues) -> RetryBudget | None:
    """A ``retryBudget`` section → the pool's budget (unset fields: 20 %, at least 3)."""
    before = len(issues.found)
    percent = _bounded(spec.percent, 1, 100, f"{where}.percent", issues)
    least = _bounded(spec.min_concurrent, 0, 10_000, f"{where}.minConcurrent", issues)
    if len(issues.found) > before:
        return None
    base = RetryBudget()
    return RetryBudget(percent=base.percent if percent is None else percent,
                       min_concurrent=base.min_concurrent if least is None else least)


def persistence(spec: PersistenceSpec, *, where: str, issues: Issues) -> Persistence | None:
    kind = _PERSISTENCE_NAMES.get(_key(spec.type))
    if kind is None:
        issues.add(f"{where}.type", f"persistence type {quote(spec.type)} is not one of Cookie, "
                   "Header, SourceIP")
        return None
    ttl_ms = duration_ms(spec.ttl, f"{where}.ttl", issues) if spec.ttl else 0
    if ttl_ms is None:
        return None
    name = spec.name or ""
    if kind is PersistenceKind.COOKIE:
        name = name or DEFAULT_COOKIE
        if not _COOKIE_NAME.match(name):
            issues.add(f"{where}.name", f"cookie name {quote(name)} is not a token")
            return None
    elif kind is PersistenceKind.HEADER and not _HEADER_NAME.match(name):
        issues.add(f"{where}.name", "a Header persistence needs the header's name" if not name
                   else f"header name {quote(name)} is not a token")
        return None
    return Persistence(kind=kind, name=name if kind is not PersistenceKind.SOURCE_IP else "",
                       ttl_s=ttl_ms // 1000 if kind is PersistenceKind.COOKIE else 0)


def load_balancer(spec: LoadBalancerSpec, *, where: str, issues: Issues
                  ) -> tuple[LBPolicy, Persistence | None] | None:
    """(algorithm, hash key) — the key only for RingHash and Maglev (source IP when unset)."""
    algorithm = _LB_NAMES.get(_key(spec.type))
    if algorithm is None:
        issues.add(f"{where}.type", f"algorithm {quote(spec.type)} is not one of RoundRobin, "
                   "LeastRequest, Random, RingHash, Maglev")
        return None
    if algorithm not in (LBPolicy.RING_HASH, LBPolicy.MAGLEV):
        if spec.hash_on is not None:
            issues.add(f"{where}.hashOn", f"hashOn needs RingHash or Maglev, not {spec.type}")
            return None
        return algorithm, None
    if spec.hash_on is None:
        return algorithm, Persistence(kind=PersistenceKind.SOURCE_IP)
    key = persistence(spec.hash_on, where=f"{where}.hashOn", issues=issues)
    return (algorithm, key) if key is not None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteTimeouts:
    request_ms: int | None = None
    idle_ms: int | None = None


def timeouts(spec: TimeoutsSpec, *, where: str, issues: Issues
             ) -> tuple[int | None, RouteTimeouts]:
    """(connect timeout of the pool, request/idle timeouts of routes); "0s" disables the
    request and idle timeouts."""
    connect = duration_ms(spec.connect, f"{where}.connect", issues) if spec.connect else None
    connect = _bounded(connect, 1, 600_000, f"{where}.connect", issues)
    request = duration_ms(spec.request, f"{where}.request", issues) if spec.request else None
    idle = duration_ms(spec.idle, f"{where}.idle", issues) if spec.idle else None
    return connect, RouteTimeouts(request_ms=request, idle_ms=idle)


def retry(spec: RetrySpec, *, where: str, issues: Issues) -> RetryPolicy | None:
    before = len(issues.found)
    base = RetryPolicy()
    attempts = _bounded(spec.attempts, 0, 10, f"{where}.attempts", issues)
    on: list[RetryOn] = []
    for i, name in enumerate(spec.retry_on):
        found = _RETRY_NAMES.get(name.strip().lower())
        if found is None:
            issues.add(f"{where}.retryOn[{i}]", f"{quote(name)} is not one of 5xx, gateway-error, "
                       "reset")
        else:
            on.append(found)
    codes = _codes(spec.status_codes, f"{where}.statusCodes", issues)
    if codes:
        on.append(RetryOn.STATUS_CODES)
    per_try = (duration_ms(spec.per_try_timeout, f"{where}.perTryTimeout", issues)
               if spec.per_try_timeout else None)
    backoff = duration_ms(spec.backoff, f"{where}.backoff", issues) if spec.backoff else None
    backoff = _bounded(backoff, 1, 60_000, f"{where}.backoff", issues)
    if len(issues.found) > before:
        return None
    chosen = tuple(dict.fromkeys(on)) if (spec.retry_on or codes) else base.retry_on
    return RetryPolicy(attempts=attempts if attempts is not None else base.attempts,
                       retry_on=chosen,
                       status_codes=codes, idempotent_only=spec.idempotent_only,
                       per_try_timeout_ms=per_try or None, backoff_ms=backoff)


def _codes(values: tuple[int, ...], where: str, issues: Issues) -> tuple[int, ...]:
    out = []
    for i, code in enumerate(values):
        if 500 <= code <= 599:
            out.append(code)
        else:
            issues.add(f"{where}[{i}]", f"{code} is not a 5xx status")
    return tuple(dict.fromkeys(out))


def session_persistence(spec: SessionPersistence, *, where: str, issues: Issues
                        ) -> Persistence | None:
    """Gateway API ``sessionPersistence`` → a persistence (cookie or header; no idle timeout:
    hashing has no notion of an idle session, which is reported)."""
    kind = {"cookie": "Cookie", "header": "Header"}.get(spec.type.lower())
    if kind is None:
        issues.add(f"{where}.type", f"type {quote(spec.type)} is not Cookie or Header")
        return None
    if spec.idle_timeout is not None:
        issues.add(f"{where}.idleTimeout", "idleTimeout is not supported (sessions are kept "
                   "by consistent hashing, which has no idle expiry)")
        return None
    lifetime = (spec.cookie_config or {}).get("lifetimeType", "Session")
    ttl = spec.absolute_timeout if lifetime == "Permanent" or spec.absolute_timeout else None
    if lifetime == "Permanent" and spec.absolute_timeout is None:
        issues.add(f"{where}.absoluteTimeout", "a Permanent cookie needs absoluteTimeout")
        return None
    return persistence(PersistenceSpec(type=kind, name=spec.session_name, ttl=ttl),
                       where=where, issues=issues)


def client_ip_affinity(timeout_s: int | None) -> Persistence:
    """Service ``sessionAffinity: ClientIP``. Its timeout cannot apply: hashing keeps a client
    on its member for as long as the member stays (``client_ip`` warns about a non-default one)."""
    del timeout_s
    return Persistence(kind=PersistenceKind.SOURCE_IP)


# --- annotations --------------------------------------------------------------------------------

ANNOTATIONS = frozenset(a.short for a in ann.TRAFFIC)  # the names after podway.io/
_AFFINITY = {"cookie": "Cookie", "client-ip": "SourceIP", "source-ip": "SourceIP"}


def annotation_spec(annotations: Mapping[str, str], issues: Issues) -> TrafficPolicySpec | None:
    """``podway.io/`` annotations → the TrafficPolicy sections they stand for (None: none set).

    Fields of issues are ``metadata.annotations[podway.io/<name>]``.
    """
    # Only the annotations of this module: other podway.io/ annotations (TLS, protocols, the
    # readiness gate) belong to other features, which judge their own values.
    ours = {k[len(ann.PREFIX):]: v.strip() for k, v in annotations.items()
            if k.startswith(ann.PREFIX) and k[len(ann.PREFIX):] in ANNOTATIONS}
    if not ours:
        return None

    def where(name: str) -> str:
        return f"metadata.annotations[{ann.PREFIX}{name}]"

    def number(name: str) -> int | None:
        text = ours.get(name)
        if text is None:
            return None
        if not text.isdigit() or len(text) > 6:
            issues.add(where(name), f"{quote(text)} is not a whole number",
                       Reason.INVALID_ANNOTATION)
            return None
        return int(text)

    sections: dict[str, object] = {}
    if "lb-algorithm" in ours or "hash-on" in ours:
        hash_on = _hash_on(ours.get("hash-on"), where("hash-on"), issues)
        sections["load_balancer"] = LoadBalancerSpec(
            type=ours.get("lb-algorithm", "Maglev" if hash_on else "RoundRobin"),
            hash_on=hash_on)
    if "affinity" in ours:
        kind = _AFFINITY.get(ours["affinity"].lower())
        if kind is None and ours["affinity"].lower() != "none":
            issues.add(where("affinity"), f"{quote(ours['affinity'])} is not one of cookie, "
                       "client-ip, none", Reason.INVALID_ANNOTATION)
        elif kind is not None:
            sections["persistence"] = PersistenceSpec(
                type=kind, name=ours.get("affinity-cookie"), ttl=ours.get("affinity-ttl"))
    check_keys = ("health-check", "health-check-path", "health-check-host",
                  "health-check-statuses", "health-check-interval", "health-check-timeout",
                  "healthy-threshold", "unhealthy-threshold")
    if any(k in ours for k in check_keys):
        sections["health_check"] = _health_check_spec(ours, number)
    if "outlier-detection" in ours:
        text = ours["outlier-detection"].lower()
        if text in ("off", "none", "false"):
            sections["outlier_detection"] = OutlierDetectionSpec(enabled=False)
        else:
            sections["outlier_detection"] = OutlierDetectionSpec(
                consecutive_errors=number("outlier-detection"))
    if any(k in ours for k in ("connect-timeout", "request-timeout", "idle-timeout")):
        sections["timeouts"] = TimeoutsSpec(connect=ours.get("connect-timeout"),
                                            request=ours.get("request-timeout"),
                                            idle=ours.get("idle-timeout"))
    if "retries" in ours or "retry-on" in ours:
        on = tuple(s.strip() for s in ours.get("retry-on", "").split(",") if s.strip())
        sections["retry"] = RetrySpec(attempts=number("retries"), retry_on=on)
    if "retry-budget" in ours or "retry-budget-min-concurrent" in ours:
        sections["retry_budget"] = RetryBudgetSpec(
            percent=_percent(ours.get("retry-budget"), where("retry-budget"), issues),
            min_concurrent=number("retry-budget-min-concurrent"))
    return TrafficPolicySpec(**sections) if sections else None


def _percent(text: str | None, where: str, issues: Issues) -> int | None:
    """``20%`` or ``20`` → 20 (the range is judged with the section)."""
    if text is None:
        return None
    digits = text.removesuffix("%").strip()
    if not digits.isdigit() or len(digits) > 6:
        issues.add(where, f"{quote(text)} is not a whole percentage such as 20%",
                   Reason.INVALID_ANNOTATION)
        return None
    return int(digits)


def _health_check_spec(ours: Mapping[str, str], number: Callable[[str], int | None]
                       ) -> HealthCheckSpec:
    """The ``healthCheck`` section the ``health-check*`` annotations (``ours``, by name without
    the prefix) stand for; ``number`` reads a whole-number annotation."""
    kind_text = ours.get("health-check")
    enabled = (kind_text or "").lower() not in ("none", "off", "false")
    statuses = tuple(s.strip() for s in ours.get("health-check-statuses", "").split(",")
                     if s.strip())
    return HealthCheckSpec(
        enabled=enabled, type=kind_text if enabled else None,
        path=ours.get("health-check-path"), host=ours.get("health-check-host"),
        expected_statuses=statuses, interval=ours.get("health-check-interval"),
        timeout=ours.get("health-check-timeout"),
        healthy_threshold=number("healthy-threshold"),
        unhealthy_threshold=number("unhealthy-threshold"))


def _hash_on(text: str | None, where: str, issues: Issues) -> PersistenceSpec | None:
    """``source-ip``, ``header:NAME`` or ``cookie:NAME``."""
    if text is None:
        return None
    kind, _, name = text.partition(":")
    mapped = {"source-ip": "SourceIP", "client-ip": "SourceIP", "header": "Header",
              "cookie": "Cookie"}.get(kind.strip().lower())
    if mapped is None:
        issues.add(where, f"{quote(text)} is not source-ip, header:NAME or cookie:NAME",
                   Reason.INVALID_ANNOTATION)
        return None
    return PersistenceSpec(type=mapped, name=name.strip() or None)


ANNOTATION_OF_FIELD = {
    "healthCheck.type": "health-check", "healthCheck.path": "health-check-path",
    "healthCheck.host": "health-check-host", "healthCheck.expectedStatuses":
    "health-check-statuses", "healthCheck.interval": "health-check-interval",
    "healthCheck.timeout": "health-check-timeout", "healthCheck.healthyThreshold":
    "healthy-threshold", "healthCheck.unhealthyThreshold": "unhealthy-threshold",
    "outlierDetection.consecutiveErrors": "outlier-detection", "loadBalancer.type":
    "lb-algorithm", "loadBalancer.hashOn": "hash-on", "persistence.type": "affinity",
    "persistence.name": "affinity-cookie", "persistence.ttl": "affinity-ttl",
    "timeouts.connect": "connect-timeout", "timeouts.request": "request-timeout",
    "timeouts.idle": "idle-timeout", "retry.attempts": "retries", "retry.retryOn": "retry-on",
    "retryBudget.percent": "retry-budget",
    "retryBudget.minConcurrent": "retry-budget-min-concurrent",
}


def section_of_annotation(where: str) -> str:
    """``metadata.annotations[podway.io/retries]`` → ``retry`` (the section it feeds)."""
    name = where.removeprefix(f"metadata.annotations[{ann.PREFIX}").rstrip("]")
    return next((k.split(".")[0] for k, v in ANNOTATION_OF_FIELD.items() if v == name), "")


def annotation_field(where: str) -> str:
    """A section field (``healthCheck.interval``) → the annotation it came from."""
    if where.startswith("metadata."):
        return where
    bare = re.sub(r"\[\d+\]$", "", where)
    name = ANNOTATION_OF_FIELD.get(bare) or ANNOTATION_OF_FIELD.get(".".join(bare.split(".")[:2]))
    return f"metadata.annotations[{ann.PREFIX}{name}]" if name else "metadata.annotations"
