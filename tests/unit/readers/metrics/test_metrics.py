"""Metrics of run/engine: documented exactly, bounded Envoy stats in the bootstrap, pipeline
series from states, and a scrape that survives a silent Envoy."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

import podway.envoy.engine.process  # registers the supervisor's series on the process registry
import podway.envoy.xds.server  # noqa: F401 - registers the xDS series on the process registry
from podway.envoy.engine.bootstrap import (
    BOUNDED_STAT_PREFIXES,
    BootstrapOptions,
    EnvoyStats,
    bootstrap,
)
from podway.pipeline import Rejection
from podway.programs.agent.metrics import Metrics
from podway.programs.controller.metrics import ControllerMetrics
from podway.readers.metrics.exposition import make_app
from podway.readers.metrics.pipeline import PipelineMetrics
from tests.metrics_names import families, grafana_metrics
from tests.unit.readers.dashboard.test_view import state

DOCS = Path(__file__).resolve().parents[4] / "docs" / "observability.md"


def documented() -> dict[str, str]:
    """``name: type`` of every metric row in docs/observability.md's tables."""
    rows = re.findall(r"^\| `((?:podway|envoy)_\w+)` \| (\w+) \|", DOCS.read_text(), re.MULTILINE)
    return dict(rows)


async def scrape() -> str:
    metrics = PipelineMetrics()
    app = make_app(registries=[metrics.registry], engine_admin=lambda: "127.0.0.1:1",
                   scrape_limit_s=5.0)  # port 1: refused at once
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/metrics")
        assert response.status == 200
        return await response.text()


async def test_every_podway_metric_is_documented_with_its_type_and_nothing_else() -> None:
    """The docs' tables list exactly the podway_ families run, engine, agent and controller
    expose."""
    exposed = (families(await scrape()) | families(Metrics().render().decode())
               | families(ControllerMetrics().render().decode()))
    exposed = {n: t for n, t in exposed.items()
               if n.startswith("podway_") and not n.endswith("_created")}
    docs = {n: t for n, t in documented().items() if n.startswith("podway_")}
    assert docs == exposed


def test_the_grafana_dashboard_uses_only_documented_metrics() -> None:
    """Every podway_/envoy_ series Grafana queries is in the docs (histograms by base name)."""
    names = set(documented())
    for used in grafana_metrics():
        base = re.sub(r"_(bucket|sum|count)$", "", used)
        assert used in names or base in names, used


async def test_a_silent_envoy_leaves_the_scrape_whole_and_says_so() -> None:
    """Envoy not answering: Podway's series are there and podway_engine_stats_up is 0."""
    text = await scrape()
    assert "podway_engine_stats_up 0.0" in text
    assert "podway_pipeline_generations_total" in text
    assert "envoy_" not in text


def test_bootstrap_keeps_only_bounded_stats_unless_detailed() -> None:
    """Bounded: a stats_matcher keeps fixed or per-listener prefixes, never per pool
    (``cluster.`` only for Podway's own xDS cluster). Detailed: no matcher at all."""
    bounded = bootstrap(BootstrapOptions(node_id="n", xds="127.0.0.1:1"))
    patterns = bounded["stats_config"]["stats_matcher"]["inclusion_list"]["patterns"]
    prefixes = [p["prefix"] for p in patterns]
    assert prefixes == list(BOUNDED_STAT_PREFIXES)
    assert [p for p in prefixes if p.startswith(("cluster.", "vhost."))] == ["cluster.podway-xds."]
    detailed = bootstrap(BootstrapOptions(node_id="n", xds="127.0.0.1:1",
                                          stats=EnvoyStats.DETAILED))
    assert "stats_config" not in detailed


def test_pipeline_series_follow_states() -> None:
    """A generation counts once (an engine decision on the same generation does not), and the
    gauges say what the newest state holds."""
    metrics = PipelineMetrics()
    first = state(a_ready=False)
    metrics.observe(first, now=100.0)
    refused = Rejection(node="n", type_url="t.Cluster", resource="x", version="1", message="m")
    metrics.observe(replace(first, version=first.version + 1, rejections=(refused,)), now=101.0)
    reg = metrics.registry
    assert reg.get_sample_value("podway_pipeline_generations_total") == 1
    assert reg.get_sample_value("podway_pipeline_last_apply_timestamp_seconds") == 100.0
    assert reg.get_sample_value("podway_engine_rejections") == 1
    assert reg.get_sample_value("podway_pool_members", {"state": "ready"}) == 1
    assert reg.get_sample_value("podway_pool_members", {"state": "not_ready"}) == 1
    assert reg.get_sample_value("podway_ir_objects", {"kind": "listener"}) == 1
    assert reg.get_sample_value("podway_pipeline_stage_duration_seconds_count",
                                {"stage": "translate"}) == 1
