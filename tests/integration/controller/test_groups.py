"""Engine groups with two real engines: each serves exactly its group's Services (listeners,
clusters, endpoints), over delta and state-of-the-world xDS; moving a Service to another group
moves it between engines live."""

from __future__ import annotations

import asyncio

import pytest

from podway.envoy import types
from podway.envoy.engine import admin
from podway.envoy.engine.process import Engine
from podway.envoy.xds.protocol import Ack, Event
from tests.e2e.harness import echo_backend, eventually, free_port, get

from .bed import Bed, edit, endpoint_slice, lb_service, members

pytestmark = pytest.mark.e2e
GROUP = "podway.io/engine-group"


async def served(engine: Engine) -> tuple[set[str], set[str]]:
    """Listener and cluster names the engine holds now (its admin)."""
    address = await engine.wait_started()
    _, listeners = await admin.request(address, "/listeners")
    _, clusters = await admin.request(address, "/clusters")
    return ({line.split("::")[0] for line in listeners.splitlines() if line},
            {line.split("::")[0] for line in clusters.splitlines() if line.startswith("pool/")})


def of(names: set[str], service: str) -> set[str]:
    return {n for n in names if f"/default/{service}/" in n}


async def test_each_engine_serves_only_its_group(bed: Bed) -> None:
    """Engine a (delta) holds Service a only, engine b (SotW) Service b only; the unannotated
    Service c (group default) is on neither; annotating c with group b brings it to engine b,
    which then answers on its port, and takes nothing to engine a."""
    ports = {name: free_port() for name in "abc"}
    for name in "abc":
        echo_port, task = await echo_backend(name)
        bed.tasks.append(task)
        annotations = {GROUP: name} if name != "c" else {}
        bed.emu.put("services", lb_service(name, ports[name], echo_port,
                                           annotations=annotations))
        bed.emu.put("endpointslices", endpoint_slice(name, {f"{name}-1": "127.0.0.1"},
                                                     echo_port), group="discovery.k8s.io")
    await bed.start()
    await bed.until(lambda s: all(members(s, f"pool/default/{n}/{ports[n]}/tcp")
                                  for n in "abc"))
    engine_a = await bed.engine("engine-a", group="a")
    engine_b = await bed.engine("engine-b", group="b", delta=False)
    for name, engine in (("a", engine_a), ("b", engine_b)):
        status, body = await get(ports[name], f"{name}.test")
        assert (status, body.get("name")) == (200, name)
        listeners, clusters = await served(engine)
        other = "b" if name == "a" else "a"
        assert of(listeners, name)
        assert of(clusters, name)
        assert not of(listeners, other) | of(listeners, "c")
        assert not of(clusters, other) | of(clusters, "c")
    assert bed.controller is not None
    applied = asyncio.Event()  # engine b ACKed listeners that include c's

    def on_event(event: Event) -> None:
        if (isinstance(event, Ack) and event.node == "engine-b"
                and event.type_url == types.LISTENER
                and any("/default/c/" in name for name in event.resources)):
            applied.set()

    bed.controller.event_hooks.append(on_event)
    service_c = bed.emu.get("services", "default", "c")
    assert service_c is not None
    service_c["metadata"]["annotations"] = {GROUP: "b"}
    edit(bed, "services", service_c)
    await asyncio.wait_for(applied.wait(), 15)

    async def answers_c() -> bool:  # the listener may still be warming right after the ACK
        status, body = await get(ports["c"], "c.test")
        return (status, body.get("name")) == (200, "c")

    await eventually(answers_c, within=15)
    listeners_a, clusters_a = await served(engine_a)
    assert not of(listeners_a, "c") | of(clusters_a, "c")
