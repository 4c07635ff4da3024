"""The pool-level sections of one pool, picked source by source (``traffic``'s precedence): each
section (health check, outlier detection, load balancer, persistence, connect timeout) is taken
from the first source that sets it; the defaults prove the pool's protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import (
    HASHING,
    HealthCheck,
    LBPolicy,
    OutlierDetection,
    Persistence,
    PoolProtocol,
    RetryBudget,
)
from podway.model.policy import TrafficPolicySpec
from podway.translate.pools import traffic_values as tv
from podway.translate.pools.traffic_defaults import default_health_check, default_outlier_detection


@dataclass(slots=True)
class Chosen:
    """Pool-level sections picked so far; each is taken from the first source that sets it."""

    protocol: PoolProtocol
    host: str
    health: HealthCheck | None = None
    outlier: OutlierDetection | None = None
    persistence: Persistence | None = None
    algorithm: LBPolicy | None = None
    hash_key: Persistence | None = None
    connect: int | None = None
    budget: RetryBudget | None = None
    done: set[str] = field(default_factory=set)
    rank: int = 0  # of the source being applied: lower wins
    persistence_rank: int = -1
    algorithm_rank: int = -1

    def __post_init__(self) -> None:
        self.health = default_health_check(self.protocol, self.host)
        self.outlier = default_outlier_detection(self.protocol)

    def take_persistence(self, value: Persistence) -> None:
        if "persistence" not in self.done:
            self.done.add("persistence")
            self.persistence = value
            self.persistence_rank = self.rank

    def algorithm_overrules_persistence(self) -> bool:
        """A non-hashing algorithm chosen by a more specific source than the persistence:
        the algorithm stands (persistence would need a hashing one)."""
        return (self.persistence is not None and self.algorithm is not None
                and self.algorithm not in HASHING
                and 0 <= self.algorithm_rank < self.persistence_rank)

    def _first(self, section: str, present: bool) -> bool:
        if not present or section in self.done:
            return False
        self.done.add(section)
        return True

    def apply(self, s: TrafficPolicySpec, issues: tv.Issues) -> None:
        if s.health_check is not None and "health" not in self.done:
            if not s.health_check.enabled:
                self.health = None
                self.done.add("health")
            else:
                check = tv.health_check(s.health_check, protocol=self.protocol, host=self.host,
                                        where="healthCheck", issues=issues)
                if check is not None:  # else: not for this pool; a later source or the default
                    self.health = check
                    self.done.add("health")
        if s.outlier_detection is not None and self._first("outlier", True):
            self.outlier = (tv.outlier_detection(s.outlier_detection, where="outlierDetection",
                                                 issues=issues)
                            if s.outlier_detection.enabled else None)
        if s.load_balancer is not None and self._first("lb", True):
            lb = tv.load_balancer(s.load_balancer, where="loadBalancer", issues=issues)
            if lb is not None:
                self.algorithm, self.hash_key = lb
                self.algorithm_rank = self.rank
        if s.persistence is not None and "persistence" not in self.done:
            value = tv.persistence(s.persistence, where="persistence", issues=issues)
            if value is not None:
                self.take_persistence(value)
        if s.timeouts is not None and self._first("connect", bool(s.timeouts.connect)):
            self.connect, _ = tv.timeouts(s.timeouts, where="timeouts", issues=issues)
        if s.retry_budget is not None and self._first("budget", True):
            self.budget = tv.retry_budget(s.retry_budget, where="retryBudget", issues=issues)
