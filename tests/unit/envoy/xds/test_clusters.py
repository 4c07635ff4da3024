"""Clusters built from pool settings: the health and protocol knobs Envoy must be given."""

from __future__ import annotations

from dataclasses import replace

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.type.v3 import http_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from podway.envoy.config import clusters
from podway.envoy.config.clusters import CHECK_JITTER_PERCENT, built, cluster
from podway.ir import (
    HealthCheck,
    HealthCheckKind,
    LBPolicy,
    OutlierDetection,
    Persistence,
    PersistenceKind,
    PoolProtocol,
    PoolSettings,
    RetryBudget,
    UpstreamTLS,
)
from podway.ir.listener import TLSCertificate


def test_every_cluster_disables_panic_mode() -> None:
    """Each cluster sets a 0 % panic threshold, so unhealthy members never get traffic."""
    for protocol in PoolProtocol:
        built = cluster("p", PoolSettings(protocol=protocol))
        assert built.common_lb_config.HasField("healthy_panic_threshold")
        assert built.common_lb_config.healthy_panic_threshold.value == 0


def test_every_cluster_applies_health_changes_at_once() -> None:
    """No update merge window: a new member's first passed check reaches the workers at once
    (Envoy's default 1 s window left a pool whose members were all replaced without a healthy
    member for that second; tests/integration/controller/test_traffic.py::*under_load* measure
    it)."""
    for protocol in PoolProtocol:
        built = cluster("p", PoolSettings(protocol=protocol))
        assert built.common_lb_config.HasField("update_merge_window")
        assert built.common_lb_config.update_merge_window.ToMilliseconds() == 0


def _tls_context(protocol: PoolProtocol) -> tls_pb2.UpstreamTlsContext:
    built = cluster("p", PoolSettings(protocol=protocol, upstream_tls=UpstreamTLS(sni="m.test")))
    context = tls_pb2.UpstreamTlsContext()
    assert built.transport_socket.typed_config.Unpack(context)
    return context


def test_upstream_tls_offers_the_pool_protocol_by_alpn() -> None:
    """TLS to members offers h2 for HTTP/2 and gRPC pools, http/1.1 for HTTP/1, none for TCP."""
    alpn = {p: list(_tls_context(p).common_tls_context.alpn_protocols)
            for p in (PoolProtocol.HTTP2, PoolProtocol.GRPC, PoolProtocol.HTTP1,
                      PoolProtocol.TCP)}
    assert alpn == {PoolProtocol.HTTP2: ["h2"], PoolProtocol.GRPC: ["h2"],
                    PoolProtocol.HTTP1: ["http/1.1"], PoolProtocol.TCP: []}


def test_http_health_checks_speak_the_pool_http_version() -> None:
    """HTTP checks of HTTP/2 and gRPC pools use the HTTP/2 codec; HTTP/1 pools keep HTTP/1.1."""
    check = HealthCheck(kind=HealthCheckKind.HTTP, http_path="/healthz")
    codec = {p: cluster("p", PoolSettings(protocol=p, health_check=check)).health_checks[0]
             .http_health_check.codec_client_type
             for p in (PoolProtocol.HTTP2, PoolProtocol.GRPC, PoolProtocol.HTTP1)}
    assert codec == {PoolProtocol.HTTP2: http_pb2.HTTP2, PoolProtocol.GRPC: http_pb2.HTTP2,
                     PoolProtocol.HTTP1: http_pb2.HTTP1}


def test_unexpected_check_statuses_count_towards_the_threshold() -> None:
    """Every status outside the expected ranges is "retriable" (counted, not an instant fail)."""
    check = HealthCheck(kind=HealthCheckKind.HTTP, expected=((200, 299), (404, 404)))
    http = cluster("p", PoolSettings(health_check=check)).health_checks[0].http_health_check
    expected = [(r.start, r.end) for r in http.expected_statuses]
    retriable = [(r.start, r.end) for r in http.retriable_statuses]
    assert expected == [(200, 300), (404, 405)]
    assert retriable == [(100, 200), (300, 404), (405, 600)]


def test_checks_are_spread_out_but_the_first_is_at_once() -> None:
    """Every wait between checks gets a random share (pools created together would otherwise
    check their members in the same millisecond forever: 10,000 pools at one backend timed out
    and failed them all, bench/convergence.py); the first check is never delayed, since a
    cluster is warm only once each member had it."""
    for kind in HealthCheckKind:
        built = cluster("p", PoolSettings(health_check=HealthCheck(kind=kind))).health_checks[0]
        assert built.interval_jitter_percent == CHECK_JITTER_PERCENT > 0
        assert not built.HasField("initial_jitter")
        assert not built.HasField("interval_jitter")


def test_checked_pools_let_withdrawn_members_go_at_once() -> None:
    """With an active check, a member gone from the assignment is not kept while it passes."""
    checked = cluster("p", PoolSettings(health_check=HealthCheck(kind=HealthCheckKind.TCP)))
    assert checked.ignore_health_on_host_removal
    assert not cluster("p", PoolSettings()).ignore_health_on_host_removal


def test_persistence_hashes_with_maglev_unless_ring_hash_was_chosen() -> None:
    """A pool with persistence never balances round robin (its route hash would be ignored)."""
    key = Persistence(kind=PersistenceKind.COOKIE)
    plain = cluster("p", PoolSettings(persistence=key))
    ring = cluster("p", PoolSettings(persistence=key, lb_policy=LBPolicy.RING_HASH))
    assert plain.lb_policy == cluster_pb2.Cluster.MAGLEV
    assert ring.lb_policy == cluster_pb2.Cluster.RING_HASH


def test_outlier_detection_ejects_on_consecutive_errors_only() -> None:
    """Consecutive 5xx (connect failures included) are enforced; the volume-based detectors
    are off."""
    od = cluster("p", PoolSettings(outlier_detection=OutlierDetection(
        consecutive_errors=3, base_ejection_ms=10_000))).outlier_detection
    assert (od.consecutive_5xx.value, od.enforcing_consecutive_5xx.value) == (3, 100)
    assert od.enforcing_success_rate.value == 0
    assert od.enforcing_failure_percentage.value == 0
    assert od.base_ejection_time.seconds == 10
    udp = cluster("p", PoolSettings(protocol=PoolProtocol.UDP,
                                    outlier_detection=OutlierDetection(consecutive_errors=3)))
    assert not udp.HasField("outlier_detection")


def test_a_retry_budget_only_on_the_clusters_that_ask() -> None:
    """The default is a plain cap on retries in flight (no per-request cost); a pool that asks
    for a budget gets Envoy's retry_budget instead, and then no max_retries (Envoy would ignore
    it)."""
    from podway.envoy.config.clusters import MAX_RETRIES
    from podway.ir import RetryBudget

    plain = cluster("p", PoolSettings()).circuit_breakers.thresholds[0]
    assert plain.max_retries.value == MAX_RETRIES
    assert not plain.HasField("retry_budget")
    asked = cluster("p", PoolSettings(retry_budget=RetryBudget(percent=35, min_concurrent=4)))
    threshold = asked.circuit_breakers.thresholds[0]
    assert not threshold.HasField("max_retries")
    assert threshold.retry_budget.budget_percent.value == 35
    assert threshold.retry_budget.min_retry_concurrency.value == 4


_CLIENT_TLS = UpstreamTLS(sni="m.test", client_certificate=TLSCertificate(
    name="secret/a/client", hostnames=(), cert_pem="CERT", key_pem="KEY"))
_checks = st.builds(
    HealthCheck, kind=st.sampled_from(HealthCheckKind), interval_ms=st.sampled_from([1000, 5000]),
    http_path=st.sampled_from(["/", "/healthz"]), host=st.sampled_from(["", "a.test", "b.test"]),
    grpc_service=st.sampled_from(["", "svc"]), method=st.sampled_from(["GET", "HEAD"]),
    headers=st.sampled_from([(), (("x-check", "1"),)]),
    expected=st.sampled_from([((200, 399),), ((200, 200), (204, 204))]))
_settings = st.builds(
    PoolSettings, protocol=st.sampled_from(PoolProtocol), lb_policy=st.sampled_from(LBPolicy),
    health_check=st.none() | _checks,
    outlier_detection=st.none() | st.just(OutlierDetection(consecutive_errors=5)),
    persistence=st.none() | st.just(Persistence(kind=PersistenceKind.COOKIE, name="c")),
    upstream_tls=st.none() | st.just(UpstreamTLS(sni="m.test")) | st.just(_CLIENT_TLS),
    connect_timeout_ms=st.sampled_from([1000, 5000]), proxy_protocol=st.booleans(),
    connection_lifetime_ms=st.none() | st.just(30_000),
    retry_budget=st.none() | st.just(RetryBudget()))


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["pool/a/x/80", "pool/b/y/8080"]), pool=_settings)
def test_a_cluster_copied_from_its_settings_shape_is_the_one_built_field_by_field(
        name: str, pool: PoolSettings) -> None:
    """``cluster`` copies one cluster per settings (the check's host aside) and fills in the
    pool's name and host: the bytes are those of building it field by field, whatever pools
    of the same shape (other names, other hosts, no host) came before."""
    direct = built(pool)
    direct.name = name
    direct.eds_cluster_config.service_name = name
    assert (cluster(name, pool).SerializeToString(deterministic=True)
            == direct.SerializeToString(deterministic=True))


def test_pools_of_one_shape_keep_their_own_check_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clusters, "_SHAPES", {})  # the first pool of the shape makes it
    check = HealthCheck(kind=HealthCheckKind.HTTP)
    hosts = ["a.test", "", "b.test", ""]
    made = [cluster(f"p{i}", PoolSettings(health_check=replace(check, host=host)))
            for i, host in enumerate(hosts)]
    assert [c.health_checks[0].http_health_check.host for c in made] == hosts
    assert [c.name for c in made] == ["p0", "p1", "p2", "p3"]


def test_no_private_key_is_kept_by_the_shapes_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool whose members see a client certificate is built whole: the table of shapes
    would otherwise keep every rotated-out key as long as the process lives."""
    monkeypatch.setattr(clusters, "_SHAPES", {})
    made = cluster("p", PoolSettings(upstream_tls=_CLIENT_TLS))
    assert made.name == "p"
    assert made.transport_socket.name == "envoy.transport_sockets.tls"
    assert clusters._SHAPES == {}
    assert "KEY" not in repr(clusters._SHAPES)
