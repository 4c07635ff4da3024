"""Every engine's member health, one rule for explain and the dashboard
(``podway.readers.engine_health``)."""

from __future__ import annotations

from types import MappingProxyType

from podway.engines.member_health import Health, HostState, MemberHealthReports, Message
from podway.readers.dashboard.app import live_health, with_views
from podway.readers.dashboard.engine_view import HostHealth, Sample
from podway.readers.engine_health import explain_health, member_texts, reported

POOL = "pool/shop/web/80"
A, B, C = (POOL, "10.0.0.1:80"), (POOL, "10.0.0.2:80"), (POOL, "10.0.0.3:80")
OK = HostState(Health.HEALTHY)


def test_a_member_is_healthy_only_when_every_engine_reporting_it_agrees() -> None:
    views = {"kern-1": {A: OK, B: HostState(Health.PENDING)},
             "hap-1": {A: OK, B: HostState(Health.UNHEALTHY, "failed active health check")},
             "envoy-1": {C: OK}}
    assert member_texts(views) == {
        A: "healthy", C: "healthy",
        B: "hap-1: failed active health check; kern-1: not checked yet"}


def test_explain_health_adds_the_engines_to_a_local_envoys_flags() -> None:
    views = {"hap-1": {A: HostState(Health.UNHEALTHY, "failed active health check"),
                       B: OK, C: OK}}
    also = {POOL: {"10.0.0.1:80": "healthy", "10.0.0.2:80": "failed_outlier_check"}}
    assert explain_health(views, also=also) == {POOL: {
        "10.0.0.1:80": "hap-1: failed active health check",
        "10.0.0.2:80": "failed_outlier_check",  # Envoy's reason stays; hap-1 agrees it is fine
        "10.0.0.3:80": "healthy"}}


def test_the_dashboard_merges_the_views_into_its_sample() -> None:
    sample = Sample(taken_at=1.0, hosts=MappingProxyType({
        A: HostHealth(healthy=False, reason="ejected (outlier detection)"),
        B: HostHealth(healthy=True)}))
    views = {"kern-1": {A: HostState(Health.UNHEALTHY, "connect refused"),
                        B: HostState(Health.UNHEALTHY, "connect refused"), C: OK}}
    merged = with_views(sample, views, at=2.0)
    assert merged.taken_at == 1.0
    assert dict(merged.hosts) == {
        A: HostHealth(healthy=False, reason="ejected (outlier detection); kern-1: connect "
                                            "refused"),
        B: HostHealth(healthy=False, reason="kern-1: connect refused"),
        C: HostHealth(healthy=True)}
    alone = with_views(None, {"hap-1": {A: OK}}, at=3.0)  # no local Envoy: the views alone
    assert (alone.taken_at, dict(alone.hosts)) == (3.0, {A: HostHealth(healthy=True)})
    assert live_health(merged)[POOL]["10.0.0.2:80"] == "kern-1: connect refused"


async def test_reported_reads_the_views_of_the_engines_reporting_now() -> None:
    reports = MemberHealthReports()
    views = reported(reports)
    assert dict(await views()) == {}
    stream = object()
    reports.apply(stream, Message(node="hap-1", full=True, hosts={A: OK}))
    assert dict(await views()) == {"hap-1": {A: OK}}
    reports.close(stream)
    assert dict(await views()) == {}
