"""Pure parts of the admin endpoint: Envoy's /clusters JSON read into member health."""

from __future__ import annotations

from podway.readers.admin_api import parse_clusters


def test_clusters_json_becomes_health_flags_per_member() -> None:
    """Healthy hosts read "healthy"; failure flags and a non-HEALTHY EDS status are listed."""
    data = {"cluster_statuses": [{"name": "pool/a", "host_statuses": [
        {"address": {"socket_address": {"address": "10.0.0.1", "port_value": 80}},
         "health_status": {"eds_health_status": "HEALTHY"}},
        {"address": {"socket_address": {"address": "10.0.0.2", "port_value": 80}},
         "health_status": {"eds_health_status": "HEALTHY", "failed_outlier_check": True,
                           "failed_active_health_check": True}},
        {"address": {"socket_address": {"address": "fd00::1", "port_value": 81}},
         "health_status": {"eds_health_status": "DRAINING"}},
    ]}]}
    assert parse_clusters(data) == {"pool/a": {
        "10.0.0.1:80": "healthy",
        "10.0.0.2:80": "failed_active_health_check/failed_outlier_check",
        "[fd00::1]:81": "eds_draining"}}
    assert parse_clusters({}) == {}
