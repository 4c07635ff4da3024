"""The traffic settings every pool gets unless a source says otherwise (the last step of the
precedence in ``podway.translate.traffic``): a health check that proves the pool's protocol,
and outlier detection.
"""

from __future__ import annotations

from podway.ir import HealthCheck, HealthCheckKind, OutlierDetection, PoolProtocol


def default_health_check(protocol: PoolProtocol, host: str) -> HealthCheck | None:
    """The check every pool gets unless told otherwise: one that never fails a server that
    serves the pool's protocol correctly, and fails one that does not speak it at all.

    TCP pools: a connect. HTTP/1 pools: ``GET /``, healthy on any status below 500 — an answer at
    all proves the server speaks HTTP, whatever its routes (a 404 or 401 on ``/`` is normal).
    gRPC pools (a GRPCRoute, or ``appProtocol: grpc``): an HTTP/2 ``POST`` of a gRPC call (the
    standard health method, no message), healthy on HTTP 200: every gRPC server answers a call
    with 200 and a grpc-status, even one without the health service, while many (grpcio, C-core,
    Go's) reset or refuse a plain ``GET /`` — which would take every member out. h2c pools
    (``appProtocol: kubernetes.io/h2c``): the same gRPC-shaped ``POST`` over HTTP/2, healthy on
    any status below 500: an h2c pool often carries gRPC reached through an HTTPRoute or an
    Ingress (a gRPC server answers 200), and a plain h2c web server answers it with some status
    (404, 405); a server that does not speak HTTP/2 fails the connection. UDP: none (no generic
    UDP check exists). docs/reference.md, "Defaults", says why each.
    """
    if protocol is PoolProtocol.UDP:
        return None
    if protocol is PoolProtocol.TCP:
        return HealthCheck(kind=HealthCheckKind.TCP)
    if protocol in (PoolProtocol.GRPC, PoolProtocol.HTTP2):
        return HealthCheck(kind=HealthCheckKind.HTTP, http_path=GRPC_HEALTH_PATH, host=host,
                           method="POST", headers=GRPC_CALL_HEADERS,
                           expected=((200, 200),) if protocol is PoolProtocol.GRPC
                           else ((200, 499),))
    return HealthCheck(kind=HealthCheckKind.HTTP, http_path="/", host=host, expected=((200, 499),))


GRPC_HEALTH_PATH = "/grpc.health.v1.Health/Check"
GRPC_CALL_HEADERS = (("content-type", "application/grpc"), ("te", "trailers"))


DEFAULT_OUTLIER_DETECTION = OutlierDetection(consecutive_errors=5)


def default_outlier_detection(protocol: PoolProtocol) -> OutlierDetection | None:
    return None if protocol is PoolProtocol.UDP else DEFAULT_OUTLIER_DETECTION
