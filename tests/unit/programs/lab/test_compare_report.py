"""``podway lab compare``'s report: shares are fractions everywhere, the NodePortLocal minus
ClusterIP p50 comes with its noise band, and the chart keeps the p50 bars visible."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from podway.programs.lab.compare import Member, ModeResult, median_difference_interval, plot
from podway.programs.lab.report import compare_table
from podway.programs.lab.traffic import Reply


def _reply(pod: str, seconds: float) -> Reply:
    return Reply(ok=True, status=200, body=json.dumps({"pod": pod, "node": "n1"}),
                 seconds=seconds)


def test_share_by_node_is_a_fraction_like_share() -> None:
    """3 of 4 requests on node n1: share_by_node says 0.75, as share does per pod."""
    result = ModeResult("clusterip", [Member("198.19.1.2", 80, "")])
    member = result.members[0]
    result.replies = [(member, _reply(p, 0.001)) for p in ("a", "a", "b", "c")]
    summary = result.summary(pod_nodes={"a": "n1", "b": "n1", "c": "n2"}, empty_nodes=set())
    assert summary["share"] == {"a": 0.5, "b": 0.25, "c": 0.25}
    assert summary["share_by_node"] == {"n1": 0.75, "n2": 0.25}


def test_the_interval_of_a_median_difference_holds_0_for_noise_and_not_for_a_shift() -> None:
    """Same distribution: the 95 % interval spans 0 (noise); shifted by 100 µs: it does not."""
    rng = random.Random(1)
    a = [rng.gauss(600, 80) for _ in range(200)]
    b = [rng.gauss(600, 80) for _ in range(200)]
    low, high = median_difference_interval(a, b)
    assert low <= 0 <= high
    low, high = median_difference_interval([x + 100 for x in a], b)
    assert 0 < low < 100 < high
    assert median_difference_interval(a, b) == median_difference_interval(a, b)  # seeded


@pytest.mark.parametrize(("band", "verdict"), [([-12.0, 40.5], "within noise"),
                                              ([5.0, 60.0], "beyond noise")])
def test_the_table_prints_the_noise_band_next_to_the_difference(
        band: list[float], verdict: str) -> None:
    report = {"service": "default/lb", "requests_per_mode": 10, "pods": {"a": "n1"},
              "nodes_without_pod": [], "modes": [], "npl_minus_clusterip_p50_us": 30.8,
              "npl_minus_clusterip_p50_ci95_us": band}
    caption = str(compare_table(report).caption)
    assert f"30.8 µs per new connection (95 % interval {band[0]} to {band[1]} µs: {verdict})" \
        in caption


def test_the_chart_draws_latency_on_a_log_axis(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """p50 (~0.6 ms) and p99 (~12 ms) on one linear axis made the p50 bars vanish."""
    pytest.importorskip("matplotlib")
    import matplotlib.axes

    scales: list[str] = []
    original = matplotlib.axes.Axes.set_yscale

    def record(self: matplotlib.axes.Axes, value: str, **kw: object) -> None:
        scales.append(value)
        original(self, value, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_yscale", record)
    mode = {"mode": "clusterip", "share": {"a": 1.0}, "p50_us": 600.0, "p99_us": 12000.0}
    plot({"modes": [mode], "pods": {"a": "n1"}}, str(tmp_path / "chart.png"))
    assert scales == ["log"]
