"""Pipeline: any Source in, one immutable state per generation out; engine NACKs as records."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from podway.envoy import types
from podway.envoy.xds.protocol import Ack, Nack
from podway.envoy.xds.server import push_changes
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.pipeline import Pipeline, PipelineStopped, State, refused_names
from podway.sources.base import Source, SourceUpdate
from podway.translate import TranslateOptions

WEB = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {type: LoadBalancer, ports: [{port: 8080, targetPort: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: shop, labels: {kubernetes.io/service-name: web}}
ports: [{port: 80}]
endpoints: [{addresses: [127.0.0.1], conditions: {ready: true}}]
"""
LISTENER = "service/shop/web/8080/tcp"
MOVED = "service/shop/web/8081/tcp"  # the listener once the Service moves to port 8081


def update(text: str) -> SourceUpdate:
    return SourceUpdate(Snapshot.of_objects(load_text(text).objects), ())


class QueueSource:
    """A Source fed by the test: what a Kubernetes source would hand over, minus the API."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[SourceUpdate] = asyncio.Queue()

    async def watch(self) -> AsyncIterator[SourceUpdate]:
        while True:
            yield await self.queue.get()


def pipeline(*, manifest_addresses: bool = False) -> tuple[Pipeline, QueueSource]:
    source = QueueSource()
    checked: Source = source  # the protocol is all the pipeline needs
    opts = TranslateOptions(address="127.0.0.1", manifest_addresses=manifest_addresses)
    return Pipeline(checked, translate=opts), source


async def test_each_update_publishes_a_state_readers_await() -> None:
    """A state per applied update, with its IR, update and the xDS types it changed."""
    pipe, source = pipeline()
    task = asyncio.create_task(pipe.run())
    try:
        source.queue.put_nowait(update(WEB))
        state = await asyncio.wait_for(pipe.wait_for(lambda s: s.generation >= 1), 10)
        assert [listener.name for listener in state.ir.listeners] == [LISTENER]
        assert types.LISTENER in state.changed_types
        assert state.update.snapshot is not None
        source.queue.put_nowait(update(""))
        second = await asyncio.wait_for(pipe.wait_for(lambda s: s.generation >= 2), 10)
        assert second.ir.listeners == ()
        assert second.version > state.version
        assert pipe.cache.get(types.LISTENER).resources == {}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_states_iterator_coalesces_to_the_newest() -> None:
    """A reader that falls behind sees the newest state next, not every intermediate one."""
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    states = pipe.states()
    first = await anext(states)
    for _ in range(3):
        pipe.apply(update(WEB))
    newest = await anext(states)
    assert (first.generation, newest.generation) == (1, 4)
    await states.aclose()


def nack(resources: tuple[str, ...] = (), message: str = "refused") -> Nack:
    return Nack(node="n1", type_url=types.LISTENER, version="v1", nonce="1", message=message,
                resources=resources)


async def test_nack_is_recorded_per_resource_and_published() -> None:
    """A NACK naming a listener becomes one rejection of that resource in a new state."""
    pipe, _ = pipeline()
    before = pipe.apply(update(WEB))
    pipe.on_event(nack((LISTENER,)))
    state = pipe.state
    assert state is not None
    assert state.version > before.version
    assert state.generation == before.generation
    assert [(r.resource, r.type_name, r.node) for r in state.rejections] == [
        (LISTENER, "Listener", "n1")]


async def test_nack_without_names_falls_back_to_envoys_message() -> None:
    """No ``resources``: the listener names Envoy's message mentions are the refused ones."""
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    pipe.on_event(nack(message=f"Error adding/updating listener(s) {LISTENER}: cannot bind "
                               "'127.0.0.1:8080': Address already in use"))
    assert pipe.state is not None
    assert [r.resource for r in pipe.state.rejections] == [LISTENER]


async def test_rejection_stays_on_ack_of_unchanged_content_and_clears_once_changed() -> None:
    """An ACK clears a rejection only after the refused content changed (it was re-sent)."""
    pipe, _ = pipeline(manifest_addresses=True)
    pipe.apply(update(WEB))
    pipe.on_event(nack((LISTENER,)))
    ack = Ack(node="n1", type_url=types.LISTENER, version="v2", nonce="2")
    pipe.on_event(ack)
    assert pipe.state is not None
    assert len(pipe.state.rejections) == 1
    pipe.apply(update(WEB.replace("port: 8080", "port: 8080, name: other")))  # same name
    pipe.on_event(ack)
    assert pipe.state is not None
    assert len(pipe.state.rejections) == 1
    moved = WEB.replace("{type: LoadBalancer,", "{type: LoadBalancer, loadBalancerIP: 127.0.0.3,")
    pipe.apply(update(moved))  # same listener name, new address: new content
    assert pipe.state is not None
    assert len(pipe.state.rejections) == 1
    pipe.on_event(ack)
    assert pipe.state.rejections == ()


async def test_ack_naming_resources_clears_exactly_those() -> None:
    """An ACK that names what it carried clears those rejections and only those."""
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    pipe.on_event(nack((LISTENER,)))
    pipe.on_event(Ack(node="n1", type_url=types.LISTENER, version="v2", nonce="2",
                      resources=("service/shop/other/9090/tcp",)))
    assert pipe.state is not None
    assert [r.resource for r in pipe.state.rejections] == [LISTENER]
    pipe.on_event(Ack(node="n1", type_url=types.LISTENER, version="v3", nonce="3",
                      resources=(LISTENER,)))
    assert pipe.state.rejections == ()


async def test_rejection_clears_when_its_resource_is_gone() -> None:
    """The refused listener's object is deleted: its rejection goes with it."""
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    pipe.on_event(nack((LISTENER,)))
    state: State = pipe.apply(update(""))
    assert state.rejections == ()


async def test_unnamed_rejection_clears_at_the_next_ack_of_its_type() -> None:
    """A NACK whose message names nothing known is type-wide until that type is ACKed."""
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    pipe.on_event(nack(message="something odd"))
    assert pipe.state is not None
    assert [r.resource for r in pipe.state.rejections] == [""]
    pipe.on_event(Ack(node="n1", type_url=types.CLUSTER, version="v2", nonce="2"))
    assert len(pipe.state.rejections) == 1  # another type's ACK says nothing about listeners
    pipe.on_event(Ack(node="n1", type_url=types.LISTENER, version="v2", nonce="3"))
    assert pipe.state.rejections == ()


def test_refused_names_match_whole_names_only() -> None:
    """``…/80`` is not found inside ``…/8080``; several names in one message are all found."""
    message = ("Error adding/updating listener(s) service/a/b/8080/tcp: cannot bind, "
               "ingress/http: Address already in use")
    assert refused_names(message, ["service/a/b/80/tcp", "service/a/b/8080/tcp",
                                   "ingress/http", "ingress/https"]) == (
        "ingress/http", "service/a/b/8080/tcp")


class FailingSource:
    """A source whose watch dies after one update (a folder watch that failed for good)."""

    async def watch(self) -> AsyncIterator[SourceUpdate]:
        yield update(WEB)
        raise OSError("watch failed")


async def test_a_failed_source_wakes_waiters_instead_of_leaving_them_waiting() -> None:
    """The source's failure surfaces from run(), and a reader awaiting a later state is told."""
    pipe = Pipeline(FailingSource(), translate=TranslateOptions(address="127.0.0.1"))
    waiter = asyncio.create_task(pipe.wait_for(lambda s: s.generation >= 2))
    with pytest.raises(OSError, match="watch failed"):
        await pipe.run()
    with pytest.raises(PipelineStopped):
        await asyncio.wait_for(waiter, 5)
    assert pipe.state is not None
    assert pipe.state.generation == 1
    assert [state.generation async for state in pipe.states()] == [1]  # then it ends


async def test_engines_get_the_push_before_readers_get_the_state() -> None:
    """Engines first: an xDS pusher (the server's own loop) sends the new config before any
    reader of states wakes for it, so a reader's work (status, events) never delays a push."""
    pipe, source = pipeline()
    order: list[str] = []

    async def send(responses: list[object]) -> None:
        if responses:
            order.append("push")

    async def reader() -> None:
        await pipe.wait_for(lambda s: s.generation >= 1)
        order.append("state")

    pusher = asyncio.create_task(push_changes(pipe.cache, lambda: ["changed"], send))
    waiting = asyncio.create_task(reader())
    task = asyncio.create_task(pipe.run())
    try:
        source.queue.put_nowait(update(WEB))
        await asyncio.wait_for(waiting, 10)
        assert order == ["push", "state"]
    finally:
        for running in (task, pusher):
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running


async def test_an_engine_answer_during_the_push_keeps_versions_growing() -> None:
    """An engine refusing a new config while its state waits for publication (the refusal
    publishes the previous state again, with a new version): the new state then published
    carries the refusal and a version above every state published before it."""
    pipe, source = pipeline()
    published: list[State] = []
    refused = False

    async def send(responses: list[object]) -> None:
        nonlocal refused
        if responses and pipe.state is not None and not refused:  # the second config
            refused = True
            pipe.on_event(nack((MOVED,)))

    async def reader() -> None:
        async for state in pipe.states():
            published.append(state)
            if state.generation >= 2:
                return

    pusher = asyncio.create_task(push_changes(pipe.cache, lambda: ["changed"], send))
    waiting = asyncio.create_task(reader())
    task = asyncio.create_task(pipe.run())
    try:
        source.queue.put_nowait(update(WEB))
        await asyncio.wait_for(pipe.wait_for(lambda s: s.generation >= 1), 10)
        source.queue.put_nowait(update(WEB.replace("port: 8080", "port: 8081")))
        await asyncio.wait_for(waiting, 10)
        assert refused
        final = published[-1]
        assert final.generation == 2
        assert [r.resource for r in final.rejections] == [MOVED]
        versions = [s.version for s in published]
        assert versions == sorted(set(versions))
    finally:
        for running in (task, pusher):
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
