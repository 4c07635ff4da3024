"""A whole traffic policy spec judged at once: every bad value (``validate``), as for an HTTP
pool, and the spec without the sections that hold one (``without_bad_sections``): a policy with
a bad value is not applied, a bad annotation drops only its section (``podway.translate.traffic``).
"""

from __future__ import annotations

from podway.ir import PoolProtocol
from podway.model.policy import TrafficPolicySpec
from podway.translate.pools.traffic_values import (
    Issue,
    Issues,
    health_check,
    load_balancer,
    outlier_detection,
    persistence,
    retry,
    retry_budget,
    timeouts,
)

_PROBE = PoolProtocol.HTTP1


def validate(spec: TrafficPolicySpec) -> list[Issue]:
    """Every bad value of a policy, judged as for an HTTP pool (protocol-specific mismatches,
    such as an HTTP check on a TCP pool, are reported where the policy meets such a pool)."""
    issues = Issues()
    if spec.health_check is not None and spec.health_check.enabled:
        health_check(spec.health_check, protocol=_PROBE, host="probe", where="healthCheck",
                     issues=issues)
    if spec.outlier_detection is not None and spec.outlier_detection.enabled:
        outlier_detection(spec.outlier_detection, where="outlierDetection", issues=issues)
    if spec.load_balancer is not None:
        load_balancer(spec.load_balancer, where="loadBalancer", issues=issues)
    if spec.persistence is not None:
        persistence(spec.persistence, where="persistence", issues=issues)
    if spec.timeouts is not None:
        timeouts(spec.timeouts, where="timeouts", issues=issues)
    if spec.retry is not None:
        retry(spec.retry, where="retry", issues=issues)
    if spec.retry_budget is not None:
        retry_budget(spec.retry_budget, where="retryBudget", issues=issues)
    return issues.found


_SECTIONS = {"healthCheck": "health_check", "outlierDetection": "outlier_detection",
             "loadBalancer": "load_balancer", "persistence": "persistence",
             "timeouts": "timeouts", "retry": "retry", "retryBudget": "retry_budget"}


def without_bad_sections(spec: TrafficPolicySpec, bad: list[Issue]) -> TrafficPolicySpec:
    drop = {_SECTIONS[i.field.split(".")[0]] for i in bad if i.field.split(".")[0] in _SECTIONS}
    return spec.model_copy(update=dict.fromkeys(drop)) if drop else spec
