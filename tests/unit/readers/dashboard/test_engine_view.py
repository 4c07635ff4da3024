"""Reading Envoy's admin answers: request figures, latency quantiles and member health."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from podway.readers.dashboard.engine_view import (
    STATS_FILTER,
    Figures,
    parse_clusters,
    parse_stats,
    rates,
)

STATS = json.dumps({"stats": [
    {"name": "http.ingress_http.downstream_rq_total", "value": 40},
    {"name": "http.ingress_http.downstream_rq_5xx", "value": 4},
    {"name": "http.ingress_http.downstream_rq_4xx", "value": 1},
    {"name": "cluster.pool/default/web/80.upstream_rq_total", "value": 30},
    {"name": "cluster.pool/default/web/80.upstream_rq_5xx", "value": 3},
    {"name": "server.live", "value": 1},
    {"histograms": {
        "supported_quantiles": [0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100],
        "computed_quantiles": [
            {"name": "http.ingress_http.downstream_rq_time",
             "values": [{"interval": None, "cumulative": c} for c in
                        (0, 1, 2.5, 3, 4, 5, 9.5, 10, 11, 12)]},
            {"name": "cluster.pool/default/web/80.upstream_rq_time",
             "values": [{"interval": i, "cumulative": 1} for i in
                        (0, 1, 1.5, 3, 4, 5, 7.25, 10, 11, 12)]}]}}]})


def test_stats_give_figures_per_listener_and_per_pool() -> None:
    """Counters land on their listener (HTTP prefix) or pool (cluster name, slashes and all);
    p99 is the last interval's when there is one, else the cumulative one."""
    listeners, pools = parse_stats(STATS)
    assert listeners == {"ingress_http": Figures(total=40, errors_4xx=1, errors_5xx=4,
                                                 p50_ms=2.5, p99_ms=9.5)}
    assert pools == {"pool/default/web/80": Figures(total=30, errors_5xx=3, p50_ms=1.5,
                                                    p99_ms=7.25)}


@given(st.text(max_size=200))
def test_any_answer_parses_to_something_or_nothing(body: str) -> None:
    """A truncated or foreign answer never raises: it gives no figures."""
    parse_stats(body)
    parse_clusters(body)


def test_the_filter_asks_only_for_shown_stats() -> None:
    """The admin request is filtered: its answer does not grow with unrelated stats."""
    import re

    pattern = re.compile(STATS_FILTER)
    assert pattern.match("cluster.pool/a/b/80.upstream_rq_total")
    assert pattern.match("http.ingress_http.downstream_rq_time")
    assert not pattern.match("cluster.pool/a/b/80.upstream_cx_total")
    assert not pattern.match("server.live")


def test_member_health_comes_from_envoy_flags() -> None:
    """Failed active checks and outlier ejection make a member unhealthy, with the reason."""
    def host(port: int, **flags: object) -> dict[str, object]:
        return {"address": {"socket_address": {"address": "10.0.0.1", "port_value": port}},
                "health_status": {"eds_health_status": "HEALTHY", **flags}}

    body = json.dumps({"cluster_statuses": [{"name": "pool/a/web/80", "host_statuses": [
        host(1), host(2, failed_active_health_check=True), host(3, failed_outlier_check=True),
        host(4, eds_health_status="DRAINING")]}]})
    health = parse_clusters(body)
    assert health[("pool/a/web/80", "10.0.0.1:1")].healthy
    assert health[("pool/a/web/80", "10.0.0.1:2")].reason == "failed active health check"
    assert "outlier" in health[("pool/a/web/80", "10.0.0.1:3")].reason
    assert health[("pool/a/web/80", "10.0.0.1:4")].reason == "EDS: DRAINING"


def test_rates_between_two_readings() -> None:
    """Requests and 5xx per second from counter deltas; a restarted Envoy (counters went back)
    gives no rate rather than a negative one."""
    before, after = Figures(total=10, errors_5xx=1), Figures(total=30, errors_5xx=6, p99_ms=4.0)
    rate = rates(before, after, 2.0)
    assert rate is not None
    assert (rate.rps, rate.error_ratio, rate.p99_ms) == (10.0, 0.25, 4.0)
    assert rates(after, before, 2.0) is None
    idle = rates(after, after, 2.0)
    assert idle is not None
    assert idle.error_ratio is None
