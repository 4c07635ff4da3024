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


async def _first_change(clusters_first: bool) -> tuple[list[dict[str, bool]], dict[str, bool]]:
    """Which types are set at each of the cache's changes before the first state was
    published; which types are set then."""
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
        return seen, {t: pipe.cache.is_set(t) for t in types.PUSH_ORDER}
    finally:
        for job in (task, watcher):
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job


async def test_the_first_update_sets_clusters_then_assignments_first() -> None:
    """The clusters as soon as the pools' settings are known (their members not yet), then
    the load assignments, then the rest."""
    seen, last = await _first_change(clusters_first=True)
    assert seen[:2] == [{t: t == types.CLUSTER for t in types.PUSH_ORDER},
                        {t: t in (types.CLUSTER, types.ENDPOINT) for t in types.PUSH_ORDER}]
    assert len(seen) == 3
    assert all(last.values())


async def test_without_it_everything_is_set_at_once() -> None:
    seen, _ = await _first_change(clusters_first=False)
    assert all(seen[0].values())
    assert len(seen) == 1


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


def test_clusters_from_the_structure_alone_are_those_the_full_translation_builds() -> None:
    """``first_pools``: the pools' settings before their members are resolved; the ``update``
    of that snapshot takes the same structure (the same result as a translator that never
    ran ``first_pools``), and the build reuses the clusters made from it."""
    from podway.envoy.config import Builder
    from podway.translate import IncrementalTranslator

    snapshot = update(WEB + "---" + INGRESS).snapshot
    translator = IncrementalTranslator(TranslateOptions(address="127.0.0.1"))
    settings = translator.first_pools(snapshot)
    builder = Builder()
    early = builder.clusters_of(settings)
    result = translator.update(snapshot, None)
    plain = IncrementalTranslator(TranslateOptions(address="127.0.0.1")).update(snapshot, None)
    assert result.ir == plain.ir
    assert (result.problems, result.statuses) == (plain.problems, plain.statuses)
    assert settings == {name: pool.settings for name, pool in result.ir.pools.items()}
    assert all(settings[name] is pool.settings for name, pool in result.ir.pools.items())
    full = builder.build(result.ir, result.change)
    assert set(early) == {types.CLUSTER}
    assert early[types.CLUSTER]
    assert all(full[types.CLUSTER][name] is resource  # not built twice
               for name, resource in early[types.CLUSTER].items())
    assert full == Builder().build(plain.ir, plain.change)
    with pytest.raises(RuntimeError):
        translator.first_pools(snapshot)


def test_an_early_cluster_of_other_settings_is_not_taken() -> None:
    from dataclasses import replace

    from podway.envoy.config import Builder
    from podway.translate import IncrementalTranslator

    result = IncrementalTranslator(TranslateOptions(address="127.0.0.1")).update(
        update(WEB + "---" + INGRESS).snapshot, None)
    builder = Builder()
    other = {name: replace(pool.settings, connect_timeout_ms=1234)
             for name, pool in result.ir.pools.items()}
    early = builder.clusters_of(other)
    full = builder.build(result.ir, result.change)
    assert full == Builder().build(result.ir, result.change)
    assert all(full[types.CLUSTER][name] is not resource
               for name, resource in early[types.CLUSTER].items())
