"""Clusters built from pool settings: the health and protocol knobs Envoy must be given."""

from __future__ import annotations

from podway.ir import PoolProtocol, PoolSettings
from podway.xds.build.clusters import cluster


def test_every_cluster_disables_panic_mode() -> None:
    """Each cluster sets a 0 % panic threshold, so unhealthy members never get traffic."""
    for protocol in PoolProtocol:
        built = cluster("p", PoolSettings(protocol=protocol))
        assert built.common_lb_config.HasField("healthy_panic_threshold")
        assert built.common_lb_config.healthy_panic_threshold.value == 0
