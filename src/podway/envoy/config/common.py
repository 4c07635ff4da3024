"""Small pieces every resource builder shares: the ADS config source, Any packing, durations."""

from __future__ import annotations

import re

from envoy.config.core.v3 import config_source_pb2
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


#: Envoy's initial fetch timeout, seconds, where Podway sets it: 0, Envoy waits for the first
#: resources instead of going on without them after its default 15 s. The engines' bootstrap
#: (``bootstrap.ENGINE_FETCH_TIMEOUT_S``: clusters and listeners) and the scoped route tables
#: (``scoped.use_scopes``: the scopes and each scope's table, where 15 s ran out for each of
#: 10,000 tables when Envoy was busy for longer: 10,000 warnings, docs/performance.md).
WAIT_FOR_FIRST_S = 0.0


def ads_source(*, initial_fetch_timeout_s: float | None = None
               ) -> config_source_pb2.ConfigSource:
    """Fetch the referenced resource over the same ADS stream (ordering guaranteed);
    ``initial_fetch_timeout_s``: None keeps Envoy's default (15 s)."""
    source = config_source_pb2.ConfigSource(resource_api_version=config_source_pb2.V3)
    source.ads.SetInParent()
    if initial_fetch_timeout_s is not None:
        seconds = int(initial_fetch_timeout_s)
        source.initial_fetch_timeout.seconds = seconds
        source.initial_fetch_timeout.nanos = round((initial_fetch_timeout_s - seconds) * 1e9)
    return source


def pack(message: Message) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(message)
    return out


def duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def stat_prefix(name: str) -> str:
    """Envoy stat names are dot-separated; keep names readable and free of separators."""
    return _UNSAFE.sub("_", name).strip("_") or "podway"
