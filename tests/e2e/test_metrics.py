"""``/metrics`` of ``run``: Podway's series and Envoy's own, bounded unless asked otherwise;
and the Grafana dashboard under deploy/ asks only for series a real scrape has."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest

from podway.base.netaddr import HostPort
from podway.envoy.engine.bootstrap import EnvoyStats
from podway.programs.agent.metrics import Metrics
from tests.metrics_names import grafana_metrics, series_names

from .harness import SHOP_INGRESS, backend_manifests, eventually, free_port, get, make_stack

pytestmark = pytest.mark.e2e

async def scrape(tmp_path: Path, stats: EnvoyStats) -> str:
    root = tmp_path / "manifests"
    root.mkdir()
    port = free_port()
    stack = await make_stack(root, metrics=HostPort("127.0.0.1", port), envoy_stats=stats)
    try:
        backend = await stack.start_echo("web")
        stack.write("web.yaml", backend_manifests("web", backend) + "---\n" + SHOP_INGRESS)
        await stack.start()
        assert (await get(stack.http_port, "shop.test", "/"))[0] == 200
        text = ""

        async def scraped() -> bool:
            nonlocal text
            async with aiohttp.ClientSession() as session, session.get(
                    f"http://127.0.0.1:{port}/metrics") as response:
                text = await response.text()
            # Envoy's request counters are flushed to its admin on its own period.
            return "podway_engine_stats_up 1.0" in text and re.search(
                r"^envoy_http_downstream_rq_total\{[^}]*\} [1-9]", text, re.MULTILINE) is not None

        await eventually(scraped, within=20)
        return text
    finally:
        await stack.stop()


async def test_bounded_scrape_has_podway_and_envoy_series_but_no_per_pool_ones(
        tmp_path: Path) -> None:
    """By default the scrape holds Podway's series and Envoy's bounded ones (server, listeners),
    and none per pool; every series the Grafana dashboard asks for is there."""
    text = await scrape(tmp_path, EnvoyStats.BOUNDED)
    got = series_names(text)
    for wanted in ("podway_pipeline_generations_total", "podway_xds_streams",
                   "podway_ir_objects", "podway_pool_members", "envoy_server_live",
                   "envoy_http_downstream_rq_total"):
        assert wanted in got, wanted
    clusters = set(re.findall(r'envoy_cluster_name="([^"]*)"', text))
    assert clusters <= {"podway-xds"}, clusters
    agent = series_names(Metrics().render().decode())  # the agent's own /metrics
    missing = grafana_metrics() - got - agent
    assert not missing, f"the Grafana dashboard asks for series no scrape has: {missing}"


async def test_detailed_scrape_has_per_pool_series(tmp_path: Path) -> None:
    """``--envoy-stats detailed`` brings the per-pool (cluster) series back."""
    text = await scrape(tmp_path, EnvoyStats.DETAILED)
    assert re.search(r'envoy_cluster_upstream_rq_total\{[^}]*envoy_cluster_name="pool', text)


async def test_haproxy_engine_counters_come_under_the_envoy_engines_series(
        tmp_path: Path) -> None:
    """``podway run --engine haproxy``: HAProxy's own counters (``show stat``) are the series
    the Envoy engine's scrape has, with the same listener label: requests, responses by class,
    no-route requests (404), open connections, liveness; the Grafana dashboard's listener
    panels find them."""
    root = tmp_path / "manifests"
    root.mkdir()
    port = free_port()
    stack = await make_stack(root, metrics=HostPort("127.0.0.1", port), engine_kind="haproxy")
    try:
        backend = await stack.start_echo("web")
        stack.write("web.yaml", backend_manifests("web", backend) + "---\n" + SHOP_INGRESS)
        await stack.start()
        for _ in range(3):
            assert (await get(stack.http_port, "shop.test", "/"))[0] == 200
        assert (await get(stack.http_port, "nowhere.test", "/"))[0] == 404
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    finally:
        await stack.stop()
    label = 'envoy_http_conn_manager_prefix="ingress_http"'

    def value(series: str) -> float:
        found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
        assert found is not None, (series, text)
        return float(found.group(1))

    assert value(f"envoy_http_downstream_rq_total{{{label}}}") == 4
    assert value(f'envoy_http_downstream_rq_xx{{{label},envoy_response_code_class="2"}}') == 3
    assert value(f'envoy_http_downstream_rq_xx{{{label},envoy_response_code_class="4"}}') == 1
    assert value(f"envoy_http_no_route{{{label}}}") == 1
    assert value(f"envoy_http_downstream_cx_active{{{label}}}") == 0
    assert value("envoy_server_live") == 1
    assert value("podway_engine_stats_up") == 1
    # The listener panels of the Grafana dashboard ask for these names.
    assert {"envoy_http_downstream_rq_total", "envoy_http_downstream_rq_xx",
            "envoy_http_no_route", "envoy_http_downstream_cx_active"} <= series_names(text)
