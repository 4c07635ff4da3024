"""API failures map to one class per status, with Retry-After read in both header forms."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from podway.base.errors import ConfigError, PodwayError
from podway.kube.errors import (
    ApiError,
    Conflict,
    Gone,
    KubeConfigError,
    NotFound,
    ServerError,
    TooManyRequests,
    api_error,
    retry_after,
)


@pytest.mark.parametrize(("status", "cls", "retryable"), [
    (404, NotFound, False), (409, Conflict, False), (410, Gone, False),
    (429, TooManyRequests, True), (503, ServerError, True), (418, ApiError, False)])
def test_status_maps_to_class(status: int, cls: type[ApiError], retryable: bool) -> None:
    """Each status has its class (unknown 4xx: the base), and 429/5xx are retryable."""
    error = api_error(ApiException(status=status, reason="why"))
    assert type(error) is cls
    assert error.status == status
    assert error.retryable is retryable
    assert isinstance(error, PodwayError)
    assert str(error) == f"Kubernetes API: {status} why"


def test_retry_after_seconds_and_http_date() -> None:
    """Delta-seconds and HTTP dates both work; absent or garbage is None."""
    now = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    assert retry_after({"Retry-After": "12"}) == 12.0
    assert retry_after({"retry-after": "Thu, 01 Jan 2026 00:00:30 GMT"}, now=now) == 30.0
    assert retry_after({"Retry-After": "soon"}) is None
    assert retry_after(None) is None


def test_config_errors_are_config_errors() -> None:
    """Client setup failures are ConfigErrors too: the CLI shows them as one line."""
    assert issubclass(KubeConfigError, ConfigError)


async def test_in_cluster_env_without_service_account_is_one_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """KUBERNETES_SERVICE_HOST set but no token mounted: says so and what to do."""
    from podway.kube.client import load_configuration

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "198.18.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeConfigError, match=r"in-cluster configuration unusable .*--kubeconfig"):
        await load_configuration(kubeconfig=None)
