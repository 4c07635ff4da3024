"""A first start's clusters go to the engines ahead of its listeners and routes
(``Pipeline(clusters_first=True)``, ``podway run``): the cache holds the pools' clusters and load
assignments, and streams can send them, while the listeners and route tables are still being
built; a stream answers no type before it is set. Later updates are applied in one step."""

from __future__ import annotations

import asyncio

import pytest

from podway.envoy import types
from podway.envoy.xds.cache import Cache
from podway.pipeline import Pipeline
from podway.sources.base import Source
from podway.translate import TranslateOptions

from .test_pipeline import WEB, QueueSource, update

INGRESS = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: shop}
spec:
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 8080}}}}
"""


async def _first_change(clusters_first: bool) -> tuple[dict[str, bool], int, dict[str, bool]]:
    """Which types are set at the cache's first change; how many changes came before the
    first state was published; which types are set then."""
    source = QueueSource()
    checked: Source = source
    pipe = Pipeline(checked, translate=TranslateOptions(address="127.0.0.1"),
                    clusters_first=clusters_first)
    seen: list[dict[str, bool]] = []

    async def watch(cache: Cache) -> None:
        while True:
            await cache.changed().wait()
            seen.append({t: cache.is_set(t) for t in types.PUSH_ORDER})

    watcher = asyncio.create_task(watch(pipe.cache))
    task = asyncio.create_task(pipe.run())
    try:
        await asyncio.sleep(0)
        source.queue.put_nowait(update(WEB + "---" + INGRESS))
        async with asyncio.timeout(10):
            state = await pipe.wait_for(lambda s: s.generation >= 1)
        assert state.ir.listeners
        assert state.ir.pools
        assert types.CLUSTER in state.changed_types
        assert types.LISTENER in state.changed_types
        return seen[0], len(seen), {t: pipe.cache.is_set(t) for t in types.PUSH_ORDER}
    finally:
        for job in (task, watcher):
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job


async def test_the_first_update_sets_clusters_and_assignments_first() -> None:
    first, changes, last = await _first_change(clusters_first=True)
    assert first == {t: t in (types.CLUSTER, types.ENDPOINT) for t in types.PUSH_ORDER}
    assert changes == 2
    assert all(last.values())


async def test_without_it_everything_is_set_at_once() -> None:
    first, changes, _ = await _first_change(clusters_first=False)
    assert all(first.values())
    assert changes == 1


def test_set_early_leaves_the_other_types_unset_and_the_cache_not_ready() -> None:
    from podway.envoy.config import Builder
    from podway.translate import IncrementalTranslator

    result = IncrementalTranslator(TranslateOptions(address="127.0.0.1")).update(
        update(WEB + "---" + INGRESS).snapshot, None)
    cache, builder = Cache(), Builder()
    early = builder.pools_of(result.ir)
    changes = cache.set_early(early)
    assert set(changes) == {types.CLUSTER, types.ENDPOINT}
    assert not cache.ready
    assert not cache.is_set(types.LISTENER)
    clusters = cache.get(types.CLUSTER)
    full = builder.build(result.ir, result.change)
    assert early[types.CLUSTER]
    assert all(  # the build reused them: nothing built twice
        full[t][name] is resource for t in (types.CLUSTER, types.ENDPOINT)
        for name, resource in early[t].items())
    later = cache.set(full)
    assert types.CLUSTER not in later
    assert types.LISTENER in later
    assert cache.ready
    assert cache.get(types.CLUSTER).version == clusters.version


def _streams_answer(sotw: bool) -> tuple[set[str], set[str]]:
    """The types a stream subscribed to clusters, assignments and listeners answers (each
    answer ACKed, so the clusters settle) after an early set of clusters and assignments, and
    then after the full set."""
    from envoy.service.discovery.v3 import discovery_pb2 as d

    from podway.envoy.config import Builder
    from podway.envoy.xds.delta import DeltaStream
    from podway.envoy.xds.sotw import SotwStream
    from podway.translate import IncrementalTranslator

    result = IncrementalTranslator(TranslateOptions(address="127.0.0.1")).update(
        update(WEB + "---" + INGRESS).snapshot, None)
    cache, builder = Cache(), Builder()
    cache.set_early(builder.pools_of(result.ir))
    names = tuple(cache.get(types.ENDPOINT).resources)
    asked = {types.CLUSTER: (), types.ENDPOINT: names, types.LISTENER: ()}
    answered: set[str] = set()
    stream: DeltaStream | SotwStream = SotwStream(cache) if sotw else DeltaStream(cache)

    def request(type_url: str, nonce: str = "", version: str = "") -> None:
        if isinstance(stream, SotwStream):
            out, _ = stream.on_request(d.DiscoveryRequest(
                type_url=type_url, resource_names=asked[type_url], response_nonce=nonce,
                version_info=version))
        else:
            out, _ = stream.on_request(d.DeltaDiscoveryRequest(
                type_url=type_url, resource_names_subscribe=() if nonce else asked[type_url],
                response_nonce=nonce))
        for response in out:
            answered.add(response.type_url)
            request(response.type_url, response.nonce,
                    getattr(response, "version_info", "") or "")

    for type_url in asked:
        request(type_url)
    early = set(answered)
    cache.set(builder.build(result.ir, result.change))
    later = {r.type_url for r in stream.on_change()}
    return early, later


@pytest.mark.parametrize("sotw", [False, True], ids=["delta", "sotw"])
def test_a_stream_answers_no_type_before_it_is_set(sotw: bool) -> None:
    early, later = _streams_answer(sotw)
    assert early == {types.CLUSTER, types.ENDPOINT}
    assert types.LISTENER in later


def test_a_cluster_an_adopted_engine_holds_is_not_removed_before_its_listeners_are_set() -> None:
    """``podway run`` adopting a running Envoy: its clusters request may come after the early
    set of clusters and assignments but before it asks for listeners. Removing a cluster it
    holds then would leave its listeners and routes naming a cluster it no longer has (503s
    until the new listeners arrive): the removal waits for the listeners' and routes' first
    set, and goes once they are current."""
    from envoy.service.discovery.v3 import discovery_pb2 as d

    from podway.envoy.config import Builder
    from podway.envoy.xds.delta import DeltaStream
    from podway.translate import IncrementalTranslator

    result = IncrementalTranslator(TranslateOptions(address="127.0.0.1")).update(
        update(WEB + "---" + INGRESS).snapshot, None)
    cache, builder = Cache(), Builder()
    cache.set_early(builder.pools_of(result.ir))
    stream = DeltaStream(cache)
    held = d.DeltaDiscoveryRequest(type_url=types.CLUSTER)
    held.initial_resource_versions["old-pool"] = "1"
    removed: set[str] = set()

    def answer(responses: list[d.DeltaDiscoveryResponse]) -> None:
        for response in responses:
            removed.update(response.removed_resources)
            more, _ = stream.on_request(d.DeltaDiscoveryRequest(
                type_url=response.type_url, response_nonce=response.nonce))
            answer(more)

    answer(stream.on_request(held)[0])
    answer(stream.on_request(d.DeltaDiscoveryRequest(
        type_url=types.ENDPOINT,
        resource_names_subscribe=list(cache.get(types.ENDPOINT).resources)))[0])
    assert "old-pool" not in removed
    cache.set(builder.build(result.ir, result.change))
    answer(stream.on_change())
    for type_url in (types.LISTENER, types.ROUTE):
        more, _ = stream.on_request(d.DeltaDiscoveryRequest(type_url=type_url))
        answer(more)
    answer(stream.on_change())
    assert "old-pool" in removed
