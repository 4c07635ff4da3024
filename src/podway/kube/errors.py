"""Kubernetes failures as Podway exceptions: setup errors with one line to show, API errors by
HTTP status.

Everything here is a ``PodwayError``, so the CLI prints its message as one line (no traceback)
for any command. ``api_error`` maps a kubernetes-asyncio ``ApiException`` (or a bare status) to
one class per status that callers branch on (``Gone`` → re-list, ``Conflict`` → re-read, 429
and 5xx → retry with ``retry_after`` honoured); nobody compares status numbers by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from podway.base.errors import ConfigError, EnvironmentProblem, PodwayError


class KubeError(PodwayError):
    """Root of the Kubernetes failures."""


class KubeConfigError(KubeError, ConfigError):
    """No usable client configuration (no kubeconfig, not in a cluster, a broken file)."""


class KubeUnreachable(KubeError, EnvironmentProblem):
    """The API server did not answer (connection refused, DNS, TLS, timeout)."""


class ApiError(KubeError):
    """The API server answered with an error status."""

    status = 0

    def __init__(self, message: str, *, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.retry_after = retry_after  # seconds the server asked us to wait, if it did

    @property
    def retryable(self) -> bool:
        return self.status in (0, 408, 429) or self.status >= 500

    @property
    def in_short(self) -> str:
        """The refusal in a few words (the API's own text can be long)."""
        return _IN_SHORT.get(self.status, f"HTTP {self.status}")


_IN_SHORT = {401: "401 Unauthorized", 403: "403 Forbidden", 404: "404 Not Found"}


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class Gone(ApiError):
    """The resourceVersion is too old (history compacted): re-list."""

    status = 410


class Invalid(ApiError):
    status = 422


class TooManyRequests(ApiError):
    status = 429


class ServerError(ApiError):
    status = 500


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls for cls in (Unauthorized, Forbidden, NotFound, Conflict, Gone, Invalid,
                                TooManyRequests)}


def retry_after(headers: Mapping[str, str] | None, *,
                now: datetime | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), else None."""
    if not headers:
        return None
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def api_error(exc: Any) -> ApiError:
    """The typed error for a kubernetes-asyncio ``ApiException`` (or anything with
    ``status``, ``reason`` and optionally ``headers``)."""
    status = int(getattr(exc, "status", 0) or 0)
    reason = str(getattr(exc, "reason", "") or "").strip()
    headers = getattr(exc, "headers", None)
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(f"Kubernetes API: {status} {reason}".strip(), status=status,
               retry_after=retry_after(headers if isinstance(headers, Mapping) else None))
