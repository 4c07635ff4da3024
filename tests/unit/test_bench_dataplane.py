"""The data-plane bench's yardsticks are configurations Envoy accepts, and its paired ratio is
taken per round (``bench/dataplane.py``; the bench itself is run by hand, not here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import dataplane as dp  # noqa: E402

from podway.envoy.engine.process import find_envoy  # noqa: E402


def _context(tmp_path: Path) -> dp.Context:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("unused\n")
    key.write_text("unused\n")
    return dp.Context(tmp_path, 1, 2, cert, key, Path(find_envoy()))


def _validate(config: dict[str, object], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "envoy.json"
    path.write_text(json.dumps(config))
    return subprocess.run([str(find_envoy()), "--mode", "validate", "-c", str(path),
                           "-l", "error"], check=False, capture_output=True, text=True,
                          timeout=120)


def test_the_edge_yardstick_is_the_static_envoy_with_the_edge_settings(tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    static = dp._static_bootstrap(ctx, 3, 4)
    edge = dp._static_bootstrap(ctx, 3, 4)
    dp.edge_settings(edge)
    managers = [listener["filter_chains"][0]["filters"][0]["typed_config"]
                for listener in edge["static_resources"]["listeners"]]
    assert len(managers) == 2  # HTTP and HTTPS
    for manager in managers:
        assert manager["use_remote_address"] is True
        assert manager["normalize_path"] is True
        assert manager["merge_slashes"] is True
        assert manager["common_http_protocol_options"][
            "headers_with_underscores_action"] == "REJECT_REQUEST"
        # Nothing of Podway's own: no retries, no host-port stripping.
        assert "strip_any_host_port" not in manager
        assert all("retry_policy" not in host
                   for host in manager["route_config"]["virtual_hosts"])
    assert "overload_manager" in edge
    assert edge["static_resources"]["clusters"][0]["per_connection_buffer_limit_bytes"] == 32768
    # The route, cluster and addresses are the static Envoy's.
    assert [c["load_assignment"] for c in edge["static_resources"]["clusters"]] == [
        c["load_assignment"] for c in static["static_resources"]["clusters"]]


@pytest.mark.e2e
def test_envoy_accepts_the_edge_yardstick(tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    config = dp._static_bootstrap(ctx, 3, 4)
    dp.edge_settings(config)
    for listener in config["static_resources"]["listeners"]:  # no certificate files here
        listener["filter_chains"][0].pop("transport_socket", None)
    done = _validate(config, tmp_path)
    assert done.returncode == 0, done.stderr[-600:]


def test_the_ratio_is_paired_per_round() -> None:
    def sample(per_cpu_s: float) -> dp.Sample:
        return dp.Sample(rps=1, requests=int(per_cpu_s), lb_cpu_s=1.0, side_cpu_s=0, errors=0)

    got = [sample(90), sample(300), sample(100)]
    base = [sample(100), sample(200), sample(50)]
    # Per round 0.9, 1.5, 2.0: the median is 1.5 (medians first would give 100/100 = 1.0).
    assert dp._paired(got, base) == 1.5
    assert dp._paired(got, None) is None


def test_the_podway_like_variants_carry_what_podway_s_own_envoy_carries(tmp_path: Path) -> None:
    """Podway's bootstrap gives X-Real-IP a slot and its routers make no per-pool dynamic
    stats; a variant "configured as Podway configures the route" without them spent 12.5k
    instructions a request Podway's Envoy does not, and measured below it."""
    from podway.envoy.engine.bootstrap import INLINE_REQUEST_HEADERS

    config = dp.podway_like_config(_context(tmp_path), 3, 4)
    assert [h["inline_header_name"] for h in config["inline_headers"]] == list(
        INLINE_REQUEST_HEADERS)
    for listener in config["static_resources"]["listeners"]:
        manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
        router = manager["http_filters"][-1]
        assert router["name"] == "envoy.filters.http.router"
        assert router["typed_config"]["dynamic_stats"] is False
        assert manager["route_config"]["request_headers_to_remove"] == ["x-real-ip"]


@pytest.mark.e2e
def test_envoy_accepts_the_podway_like_variant(tmp_path: Path) -> None:
    config = dp.podway_like_config(_context(tmp_path), 3, 4)
    for listener in config["static_resources"]["listeners"]:
        listener["filter_chains"][0].pop("transport_socket", None)
    done = _validate(config, tmp_path)
    assert done.returncode == 0, done.stderr[-600:]
