"""A deferred resource (``envoy_config.Resource.deferred``) read by two threads at once: each
gets the encoding, neither fails (a reader pausing right after it saw the resource not yet
encoded, while another encodes it)."""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

from envoy.config.route.v3 import route_pb2

from podway.envoy.config import Resource
from podway.envoy.config.routes import Joined


def test_a_deferred_resource_read_by_two_threads_at_once() -> None:
    data = route_pb2.RouteConfiguration(name="t").SerializeToString(deterministic=True)
    resource = Resource.deferred("t", route_pb2.RouteConfiguration, Joined((data,), "d"), "d")
    code = Resource.packed.fget.__code__  # type: ignore[attr-defined]
    paused, other_done = threading.Event(), threading.Event()
    seen: list[object] = []
    lines = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if frame.f_code is not code:
            return None
        if event == "line":
            lines += 1
            if lines == 2:  # the first line ran (the resource was seen not encoded yet)
                paused.set()
                other_done.wait(10)
        return tracer

    def reader() -> None:
        sys.settrace(tracer)
        try:
            seen.append(resource.packed.value)
        except Exception as exc:  # (the outcome is what the test checks)
            seen.append(exc)
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=reader)
    thread.start()
    assert paused.wait(10)
    try:
        assert resource.packed.value == data  # the other reader encodes it meanwhile
    finally:
        other_done.set()
        thread.join(10)
    assert seen == [data]
