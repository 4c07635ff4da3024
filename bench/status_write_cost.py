"""What one status write costs the controller, per operation, old way against new way.

Two figures the load of a shared machine moves least (CPU of this process per operation,
``time.process_time``, the two ways interleaved round by round):

* **PATCH**: a JSON merge patch of an HTTPRoute's status through kubernetes_asyncio's generated
  ``patch_namespaced_custom_object_status`` (before) and through ``podway.kube.client.
  raw_request`` (what ``StatusWriter`` sends now), against the API emulator in a child process
  (``bench/convergence.py``'s, N routes), 32 in flight, a new status each round (every PATCH
  writes);
* **Event**: a ``Synced`` Event created through the generated ``create_namespaced_event``,
  its answer decoded (before), and through ``raw_request``, its answer not read (now);
* **echo**: the watch event a write comes back as, through the source's handler, parsed and
  found unchanged (before) or dropped by its resourceVersion (``KubeSource.expect_echo``, now),
  N events in this process with no API behind them.

    python bench/status_write_cost.py [--routes 2000] [--rounds 3]

Every figure is also printed as a ratio to the machine-speed reference (``speedref``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

sys.path.insert(0, str(Path(__file__).parent))
import speedref
from convergence import GW, NS, route, start_emulator
from xds_push import free_port

from podway.kube.client import raw_request, without_env_lookups
from podway.sources.kube import KubeSource
from podway.sources.kube_kinds import spec_of

CONCURRENCY = 32


def status(round_no: int) -> dict[str, Any]:
    """A route's status as the controller writes it (one parent, two conditions)."""
    stamp = f"2026-12-05T05:{round_no // 60:02d}:{round_no % 60:02d}Z"
    conditions = [{"type": kind, "status": "True", "reason": kind, "message": "",
                   "observedGeneration": 1, "lastTransitionTime": stamp}
                  for kind in ("Accepted", "ResolvedRefs")]
    return {"parents": [{"parentRef": {"group": GW, "kind": "Gateway", "name": "edge",
                                       "namespace": NS},
                         "controllerName": "podway.io/gateway-controller",
                         "conditions": conditions}]}


async def generated(api: client.ApiClient, name: str, round_no: int) -> None:
    body = {"status": status(round_no)}
    resp = await client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GW, "v1", NS, "httproutes", name, body, _content_type="application/merge-patch+json",
        _preload_content=False)
    assert resp.status == 200, resp.status
    resp.release()


async def raw(api: client.ApiClient, name: str, round_no: int) -> None:
    body = {"status": status(round_no)}
    resp = await raw_request(api, "PATCH", f"/apis/{GW}/v1/namespaces/{NS}/httproutes/{name}"
                             "/status", body=body, content_type="application/merge-patch+json")
    assert resp.status == 200, resp.status
    await resp.read()  # the writer reads the answer's resourceVersion
    resp.release()


def event(name: str, round_no: int) -> dict[str, Any]:
    """A ``Synced`` Event as the controller's recorder writes one per object."""
    stamp = "2026-12-05T05:00:00Z"
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{round_no:010d}", "namespace": NS},
            "involvedObject": {"kind": "HTTPRoute", "name": name, "namespace": NS,
                               "apiVersion": f"{GW}/v1"},
            "type": "Normal", "reason": "Synced", "message": "served", "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": "podway-controller"},
            "reportingComponent": "podway-controller",
            "reportingInstance": "podway-controller"}


async def event_generated(api: client.ApiClient, name: str, round_no: int) -> None:
    core: Any = client.CoreV1Api(api)
    resp = await core.create_namespaced_event(NS, event(name, round_no),
                                              _preload_content=False)
    assert resp.status == 201, resp.status
    await resp.json(content_type=None)  # the recorder read every answer
    resp.release()


async def event_raw(api: client.ApiClient, name: str, round_no: int) -> None:
    resp = await raw_request(api, "POST", f"/api/v1/namespaces/{NS}/events",
                             body=event(name, round_no))
    assert resp.status == 201, resp.status
    resp.release()


Patch = Callable[[client.ApiClient, str, int], Awaitable[None]]


async def patch_all(api: client.ApiClient, how: Patch, routes: int, round_no: int) -> float:
    """CPU seconds of this process for one PATCH per route."""
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        async with limit:
            await how(api, f"r{i}", round_no)
    began = time.process_time()
    await asyncio.gather(*(one(i) for i in range(routes)))
    return time.process_time() - began


def echo_cost(api: client.ApiClient, routes: int, *, skip: bool) -> float:
    """CPU seconds of the source's handler for one watch event per route (``api`` is never
    used: no request is made)."""
    spec = spec_of("HTTPRoute")
    assert spec is not None
    source = KubeSource(api, on_raw=lambda kind, event, raw: raw.pop("status", None) and None)
    source._informers["HTTPRoute"] = type("Watching", (), {"listing": False})()  # type: ignore[assignment]
    handle = source._handler(spec, "v1")
    events = []
    for i in range(routes):
        raw_route = route(i)
        raw_route["metadata"] |= {"resourceVersion": str(1000 + i), "generation": 1}
        raw_route["status"] = status(0)
        events.append(raw_route)
    for raw_route in copy.deepcopy(events):  # the snapshot holds them: the first list
        handle("ADDED", raw_route)
    source._flush(first=True)
    for raw_route in events:
        raw_route["metadata"]["resourceVersion"] += "1"
        if skip:
            source.expect_echo("HTTPRoute", (NS, raw_route["metadata"]["name"]),
                               raw_route["metadata"]["resourceVersion"])
    began = time.process_time()
    for raw_route in events:
        handle("MODIFIED", raw_route)
    return time.process_time() - began


async def main_async(args: argparse.Namespace, ref: speedref.Reference) -> None:
    child = await start_emulator(args.routes, free_port(), free_port())
    figures: dict[str, list[float]] = {}
    try:
        assert child.stdout is not None
        url = (await child.stdout.readline()).decode().strip()
        async with client.ApiClient(client.Configuration(host=url)) as api:
            without_env_lookups(api)
            await patch_all(api, raw, args.routes, 0)  # warm: connections, first writes
            for r in range(1, args.rounds + 1):
                ways: list[tuple[str, Patch]] = [
                    ("PATCH generated", generated), ("PATCH raw", raw),
                    ("Event generated", event_generated), ("Event raw", event_raw)]
                for k, (name, how) in enumerate(ways if r % 2 else ways[::-1]):
                    cpu = await patch_all(api, how, args.routes, r * 4 + k)
                    figures.setdefault(name, []).append(cpu / args.routes)
                for name, skip in (("echo parsed", False), ("echo dropped", True)):
                    figures.setdefault(name, []).append(
                        echo_cost(api, args.routes, skip=skip) / args.routes)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(child.wait(), 30)
        if child.returncode is None:
            child.kill()
            await child.wait()
    print(f"{args.routes} routes, {args.rounds} interleaved rounds; controller CPU per "
          "operation (median, then each round)")
    for name, values in figures.items():
        per = statistics.median(values)
        rounds = " / ".join(f"{v * 1e6:.0f}" for v in values)
        print(f"  {name:<16} {per * 1e6:7.0f} µs  ({ref.ratio(per * args.routes)} for all)"
              f"  rounds: {rounds} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ref = speedref.measure()
    print(ref.describe(), "(machine shared with other engineers: compare within one run)")
    asyncio.run(main_async(args, ref))
    print(ref.check_again())


if __name__ == "__main__":
    main()
