"""``podway.io/`` traffic annotations → the ``TrafficPolicySpec`` a policy would hold (so an
annotation and a policy are judged by the same functions, ``traffic_values``), and the way back
from a policy field to the annotation that set it (for problems)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from podway.model.policy import (
    HealthCheckSpec,
    LoadBalancerSpec,
    OutlierDetectionSpec,
    PersistenceSpec,
    RetryBudgetSpec,
    RetrySpec,
    TimeoutsSpec,
    TrafficPolicySpec,
)
from podway.translate import annotations as ann
from podway.translate.core.problems import Reason, quote
from podway.translate.pools.traffic_values import Issues

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
    sections.update(_retry_sections(ours, number, where("retry-budget"), issues))
    return TrafficPolicySpec(**sections) if sections else None


def _retry_sections(ours: Mapping[str, str], number: Callable[[str], int | None],
                    budget_where: str, issues: Issues) -> dict[str, object]:
    """The ``retry`` and ``retry_budget`` sections the annotations set."""
    sections: dict[str, object] = {}
    if "retries" in ours or "retry-on" in ours:
        on = tuple(s.strip() for s in ours.get("retry-on", "").split(",") if s.strip())
        sections["retry"] = RetrySpec(attempts=number("retries"), retry_on=on)
    if "retry-budget" in ours or "retry-budget-min-concurrent" in ours:
        sections["retry_budget"] = RetryBudgetSpec(
            percent=_percent(ours.get("retry-budget"), budget_where, issues),
            min_concurrent=number("retry-budget-min-concurrent"))
    return sections


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
