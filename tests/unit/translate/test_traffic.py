"""Traffic settings: precedence between sources, incremental updates, policy status."""

from __future__ import annotations

from podway.ir import Forward, HealthCheckKind, PersistenceKind, PoolProtocol
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.model.policy import HealthCheckSpec
from podway.translate import IncrementalTranslator, Result, TranslateOptions, translate
from podway.translate.core.status import to_api
from podway.translate.pools.traffic_defaults import GRPC_HEALTH_PATH, default_health_check
from podway.translate.pools.traffic_values import Issues, health_check
from tests import builders


def policy(name: str, kind: str, target: str, spec: str, group: str = "") -> str:
    return (f"apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\n"
            f"metadata: {{name: {name}, namespace: shop}}\nspec:\n"
            f"  targetRefs: [{{group: '{group}', kind: {kind}, name: {target}}}]\n{spec}")


def run(*docs: str) -> Result:
    loaded = load_text("---\n".join(docs))
    assert not loaded.errors, loaded.errors
    return translate(Snapshot.of_objects(loaded.objects), TranslateOptions(address="198.18.0.1"))


def service(annotations: dict[str, str] | None = None, *, type_: str = "ClusterIP",
            **spec: str) -> str:
    """Service shop/web (pods ``app: web``), port 80 named http."""
    return builders.manifest(builders.service("web", 80, None, type_=type_, namespace="shop",
                                              annotations=annotations, protocol=None, **spec))


def ingress(annotations: dict[str, str] | None = None) -> str:
    """Ingress shop/shop of class podway: shop.example.com/ → web:80."""
    return builders.manifest(builders.ingress("shop", namespace="shop", class_name="podway",
                                              host="shop.example.com", annotations=annotations))


def forward(result: Result) -> Forward:
    action = result.ir.listeners[0].virtual_hosts[0].routes[0].action
    assert isinstance(action, Forward)
    return action


def test_service_settings_beat_route_settings_for_the_pool() -> None:
    """The Service's annotation health check wins over a TrafficPolicy on the Ingress using it;
    the Ingress policy still sets what the Service leaves unset (the algorithm)."""
    result = run(service({"podway.io/health-check": "tcp"}), ingress(),
                 policy("p", "Ingress", "shop", "  healthCheck: {type: HTTP, path: /x}\n"
                        "  loadBalancer: {type: Random}\n", group="networking.k8s.io"))
    settings = result.ir.pools["pool/shop/web/80"].settings
    assert settings.health_check is not None
    assert settings.health_check.kind is HealthCheckKind.TCP
    assert settings.lb_policy.value == "random"


def test_an_objects_own_fields_beat_the_policy_attached_to_it() -> None:
    """Ingress annotation request-timeout beats a TrafficPolicy on the Ingress; the policy's
    retry applies (the Ingress sets none); a Service policy's idle timeout comes last."""
    result = run(service(), ingress({"podway.io/request-timeout": "7s"}),
                 policy("p", "Ingress", "shop", "  timeouts: {request: 30s}\n"
                        "  retry: {attempts: 4}\n", group="networking.k8s.io"),
                 policy("s", "Service", "web", "  timeouts: {request: 1s, idle: 9s}\n"))
    action = forward(result)
    assert (action.timeout_ms, action.idle_timeout_ms) == (7000, 9000)
    assert action.retry is not None
    assert action.retry.attempts == 4


def test_client_ip_affinity_on_a_load_balancer_service_without_a_warning() -> None:
    """sessionAffinity ClientIP: the L4 route hashes on the client address; no
    UnsupportedField warning any more."""
    result = run(service(type_="LoadBalancer", sessionAffinity="ClientIP"))
    assert result.ir.listeners[0].l4_routes[0].client_ip_affinity
    pool = result.ir.pools["pool/shop/web/80/tcp"]
    assert pool.settings.persistence is not None
    assert pool.settings.persistence.kind is PersistenceKind.SOURCE_IP
    assert not [p for p in result.problems if p.reason == "UnsupportedField"]


def test_policy_edit_is_picked_up_incrementally_and_equals_a_full_translation() -> None:
    """Changing a TrafficPolicy re-translates the pool settings; the incremental result is the
    full translation's."""
    base = [service(), ingress()]
    first = load_text("---\n".join([*base, policy("p", "Service", "web",
                                                  "  loadBalancer: {type: Random}\n")]))
    second = load_text("---\n".join([*base, policy("p", "Service", "web",
                                                   "  loadBalancer: {type: LeastRequest}\n")]))
    inc = IncrementalTranslator(TranslateOptions(address="198.18.0.1"))
    inc.update(Snapshot.of_objects(first.objects))
    snapshot = Snapshot.of_objects(second.objects)
    result = inc.update(snapshot)
    assert result.ir.pools["pool/shop/web/80"].settings.lb_policy.value == "least_request"
    assert result == translate(snapshot, TranslateOptions(address="198.18.0.1"))


def test_policy_status_is_written_as_ancestors() -> None:
    """TrafficPolicy status lists each target under status.ancestors with Accepted."""
    result = run(service(), policy("p", "Service", "web", "  loadBalancer: {type: Random}\n"))
    status = next(s for ref, s in result.statuses.items() if ref.kind == "TrafficPolicy")
    api = to_api(status, kind="TrafficPolicy")
    ancestor = api["ancestors"][0]
    assert ancestor["ancestorRef"] == {"group": "", "kind": "Service", "namespace": "shop",
                                       "name": "web"}
    assert [(c["type"], c["status"]) for c in ancestor["conditions"]] == [("Accepted", "True")]


def test_a_section_that_only_tunes_timing_keeps_the_protocol_default_probe() -> None:
    """An interval alone on an h2c or gRPC pool keeps the gRPC-shaped POST (a bare GET /,
    which grpcio resets, would take every member out); a path makes it an HTTP GET."""
    for protocol in (PoolProtocol.HTTP2, PoolProtocol.GRPC):
        issues = Issues()
        check = health_check(HealthCheckSpec(interval="2s"), protocol=protocol, host="h",
                             where="healthCheck", issues=issues)
        default = default_health_check(protocol, "h")
        assert issues.found == []
        assert check is not None
        assert default is not None
        assert (check.method, check.http_path, check.headers, check.expected) == (
            "POST", GRPC_HEALTH_PATH, default.headers, default.expected)
        assert check.interval_ms == 2000
        pathed = health_check(HealthCheckSpec(path="/healthz"), protocol=protocol, host="h",
                              where="healthCheck", issues=issues)
        assert pathed is not None
        assert (pathed.method, pathed.http_path) == ("GET", "/healthz")
    h2c = default_health_check(PoolProtocol.HTTP2, "h")
    assert h2c is not None
    assert h2c.expected == ((200, 499),)  # a plain h2c web server answers it with 404 or 405


def test_a_retry_budget_reaches_only_the_pool_that_asks() -> None:
    """``retryBudget`` is a pool section: a TrafficPolicy on the Service sets it (unset fields
    take 20 % / 3); the annotation beats the policy; without either the pool has none."""
    from podway.ir import RetryBudget

    assert run(service(), ingress()).ir.pools["pool/shop/web/80"].settings.retry_budget is None
    by_policy = run(service(), ingress(),
                    policy("s", "Service", "web", "  retryBudget: {percent: 30}\n"))
    assert by_policy.ir.pools["pool/shop/web/80"].settings.retry_budget == RetryBudget(
        percent=30, min_concurrent=3)
    by_annotation = run(service({"podway.io/retry-budget": "25%",
                                 "podway.io/retry-budget-min-concurrent": "7"}), ingress(),
                        policy("s", "Service", "web", "  retryBudget: {percent: 30}\n"))
    assert by_annotation.ir.pools["pool/shop/web/80"].settings.retry_budget == RetryBudget(
        percent=25, min_concurrent=7)


def test_a_bad_retry_budget_is_reported_and_not_applied() -> None:
    """A percentage out of range: the policy is Invalid (not applied); a bad annotation drops
    its section only, naming the annotation."""
    bad_policy = run(service(), ingress(),
                     policy("s", "Service", "web", "  retryBudget: {percent: 150}\n"))
    assert bad_policy.ir.pools["pool/shop/web/80"].settings.retry_budget is None
    assert any(p.field == "spec.retryBudget.percent" for p in bad_policy.problems), \
        bad_policy.problems
    bad_annotation = run(service({"podway.io/retry-budget": "lots"}), ingress())
    assert bad_annotation.ir.pools["pool/shop/web/80"].settings.retry_budget is None
    assert any(p.field == "metadata.annotations[podway.io/retry-budget]"
               for p in bad_annotation.problems), bad_annotation.problems
