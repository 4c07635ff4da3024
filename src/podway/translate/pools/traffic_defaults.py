"""The traffic settings every pool gets unless a source says otherwise (the last step of the
precedence in ``podway.translate.traffic``): a health check that proves the pool's protocol,
and outlier detection.
"""

from __future__ import annotations

from podway.ir import HealthCheck, HealthCheckKind, OutlierDetection, PoolProtocol


def default_health_check(protocol: PoolProtocol, host: str) -> HealthCheck | None:
    """The check every pool gets unless told otherwise: one that proves the pool's protocol.

    TCP pools: a connect. HTTP pools: ``GET /`` in the pool's HTTP version (HTTP/2 for h2c),
    healthy on any status below 500 — an answer at all proves the server speaks the protocol,
    whatever its routes. gRPC pools: an HTTP/2 ``POST`` of a gRPC call (the standard health
    method, no message), healthy on HTTP 200: every gRPC server answers a call with 200 and a
    grpc-status, even one without the health service, while many (grpcio, C-core) reset a plain
    ``GET /`` — which would take every member out. UDP: none (no generic UDP check exists).
    """
    if protocol is PoolProtocol.UDP:
        return None
    if protocol is PoolProtocol.TCP:
        return HealthCheck(kind=HealthCheckKind.TCP)
    if protocol is PoolProtocol.GRPC:
        return HealthCheck(kind=HealthCheckKind.HTTP, http_path=GRPC_HEALTH_PATH, host=host,
                           method="POST", headers=GRPC_CALL_HEADERS, expected=((200, 200),))
    return HealthCheck(kind=HealthCheckKind.HTTP, http_path="/", host=host, expected=((200, 499),))


GRPC_HEALTH_PATH = "/grpc.health.v1.Health/Check"
GRPC_CALL_HEADERS = (("content-type", "application/grpc"), ("te", "trailers"))


DEFAULT_OUTLIER_DETECTION = OutlierDetection(consecutive_errors=5)


def default_outlier_detection(protocol: PoolProtocol) -> OutlierDetection | None:
    return None if protocol is PoolProtocol.UDP else DEFAULT_OUTLIER_DETECTION
