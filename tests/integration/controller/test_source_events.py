"""The Kubernetes source and events: a CRD installed after start, bad objects isolated,
events de-duplicated and never repeated on resync."""

from __future__ import annotations

from typing import Any

from podway.model.base import ObjectRef
from podway.programs.controller.events import Due, EventRecorder
from tests.waiting import eventually

from .bed import (
    GW,
    Bed,
    cluster_service,
    endpoint_slice,
    gateway,
    gateway_class,
    http_route,
    lb_service,
    members,
)


def events(bed: Bed, reason: str) -> list[dict[str, Any]]:
    return [e for e in bed.emu.events if e.get("reason") == reason]


async def test_gateway_api_installed_after_start_is_picked_up(bed: Bed) -> None:
    """Without the CRDs the controller runs; once installed, routes are served — no restart."""
    bed.emu.put("services", cluster_service("web"))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "198.18.5.1"}),
                group="discovery.k8s.io")
    await bed.start()
    state = await bed.until(lambda s: True)
    assert state.ir.listeners == ()
    bed.emu.install_gateway_api()
    bed.emu.put("gatewayclasses", gateway_class(), group=GW)
    bed.emu.put("gateways", gateway(), group=GW)
    bed.emu.put("httproutes", http_route("r0", "r0.test"), group=GW)
    state = await bed.until(lambda s: members(s, "pool/default/web/80") == ["198.18.5.1:8080"])
    assert [ls.port for ls in state.ir.listeners] == [8080]


async def test_bad_object_gets_an_event_and_does_not_disturb_others(bed: Bed) -> None:
    """An object that does not parse is left out with a Warning event naming the field; a
    translation problem is a Warning with its reason; the good Service is served and Synced
    (a backend Service is not a front: no Synced); re-lists (a compacted watch) and unrelated
    changes repeat no event."""
    bed.emu.put("services", lb_service("good", 9001))
    bed.emu.put("services", cluster_service("backend"))  # not a front: no Synced event
    bad = lb_service("bad", 9002)
    bad["spec"]["ports"][0]["port"] = 70000
    bed.emu.put("services", bad)
    bed.emu.put("services", lb_service("weird", 9003, annotations={
        "podway.io/backend-mode": "fast"}))
    await bed.start()
    await bed.until(lambda s: {ls.port for ls in s.ir.listeners} == {9001, 9003})
    await eventually(lambda: len(events(bed, "InvalidObject")) == 1)
    await eventually(lambda: len(events(bed, "InvalidBackendMode")) == 1)
    await eventually(lambda: any(e["involvedObject"]["name"] == "good"
                            for e in events(bed, "Synced")))
    invalid = events(bed, "InvalidObject")[0]
    assert invalid["involvedObject"] == {"kind": "Service", "namespace": "default",
                                         "name": "bad", "apiVersion": "v1"}
    assert "spec.ports[0].port" in invalid["message"]
    total = len(bed.emu.events)
    bed.emu.compact()  # every watch ends with 410: a full re-list
    bed.emu.put("services", lb_service("other", 9004))
    await bed.until(lambda s: 9004 in {ls.port for ls in s.ir.listeners})
    await eventually(lambda: any(e["involvedObject"]["name"] == "other"
                            for e in events(bed, "Synced")))
    assert len(bed.emu.events) == total + 1  # only "other" Synced
    assert not any(e["involvedObject"]["name"] == "backend" for e in bed.emu.events)
    assert all(e.get("count", 1) == 1 for e in bed.emu.events)


async def test_recorder_counts_repeats_and_rate_limits_per_object(bed: Bed) -> None:
    """The same event again counts up the existing Event; past the burst, events are dropped."""
    now = [0.0]
    recorder = EventRecorder(bed.api, burst=3, refill_s=60, clock=lambda: now[0])
    due = Due(ref=ObjectRef("Service", "default", "web"), type="Warning",
              reason="BackendNotFound", message="no such Service")
    await recorder.record([due])
    await recorder.record([due])
    assert len(bed.emu.events) == 1
    assert bed.emu.events[0]["count"] == 2
    other = Due(ref=due.ref, type="Warning", reason="PortConflict", message="taken")
    await recorder.record([other, other])
    assert recorder.dropped == 1  # burst of 3 spent
    now[0] = 60.0  # one token back
    await recorder.record([other])
    assert sorted(e["count"] for e in bed.emu.events) == [2, 2]


async def test_recorder_bounds_writes_in_flight_and_counts_up_across_restarts(bed: Bed) -> None:
    """A thousand-object first state must not open a request per event at once: at most
    ``concurrency`` writes are in flight, and all are written. An Event a previous run wrote
    (409 on create) is counted up, not duplicated."""
    recorder = EventRecorder(bed.api, concurrency=2)
    in_flight, most = 0, 0
    write = recorder._write

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await write(*args, **kwargs)
        finally:
            in_flight -= 1

    recorder._write = counting  # type: ignore[method-assign]
    dues = [Due(ref=ObjectRef("Service", "default", f"web-{i}"), type="Normal",
                reason="Synced", message="served") for i in range(10)]
    await recorder.record(dues)
    assert most == 2
    assert len(bed.emu.events) == 10
    again = EventRecorder(bed.api)  # a restarted controller
    await again.record(dues[:1])
    assert len(bed.emu.events) == 10
    assert sorted(e.get("count", 1) for e in bed.emu.events)[-1] == 2
