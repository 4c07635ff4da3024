"""A big update reaches Envoy in bounded parts, each after Envoy answered the last (issue 24).

Envoy applies a response in one go on its main thread, which also runs the active health checks
(1 s timeout). 10,000 load assignments in one response kept it busy past the timeout of the
first checks it had just started; the failed members were checked again every second, all at
once, and the thread never caught up. So a delta stream sends at most
``MAX_RESOURCES_PER_RESPONSE`` resources per response and the rest after Envoy's answer, except
where Envoy takes a first response as a whole set: the stream's first clusters and listeners
(its init, hence LIVE, waits for exactly what they name) and the first scopes of a scoped
connection manager (at a start, or after its listener changed: it waits for those only)."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import replace

from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.config.scoped import table_name, table_of
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.protocol import MAX_RESOURCES_PER_RESPONSE
from podway.ir import IR

from .helpers import http_listener, ir, pool, route, vhost

N = 5_000
SOME = 1_200  # three parts
MOST = MAX_RESOURCES_PER_RESPONSE


def _ir(hosts: int, *, moved: int = -1, port: int = 8080) -> IR:
    """``hosts`` hosts, each with one route to a pool of its own; pool ``moved``'s member on
    another port."""
    return ir((http_listener(*(vhost(f"h{i}.ex", route(f"r{i}", "/", f"pool/p{i}"))
                               for i in range(hosts)), port=port),),
              *(pool(f"pool/p{i}", 9001 if i == moved else 9000) for i in range(hosts)))


def _delta(type_url: str, subscribe: tuple[str, ...] = (), nonce: str = ""
           ) -> d.DeltaDiscoveryRequest:
    return d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=subscribe,
                                   response_nonce=nonce)


class Envoy:
    """Reads responses one at a time, as Envoy's main thread does: subscribes the load
    assignments of the clusters and the tables of the scopes a response carried, then ACKs it.
    Records every response in order, and how many of a type were in flight at once."""

    def __init__(self, stream: DeltaStream) -> None:
        self.stream = stream
        self.log: list[d.DeltaDiscoveryResponse] = []
        self.in_flight: Counter[str] = Counter()
        self.assignments_before_listeners = -1  # load assignments ACKed when listeners came
        self.most_in_flight: Counter[str] = Counter()
        self._queue: deque[d.DeltaDiscoveryResponse] = deque()

    def ask(self, request: d.DeltaDiscoveryRequest) -> None:
        self._take(self.stream.on_request(request)[0])

    def _take(self, responses: list[d.DeltaDiscoveryResponse]) -> None:
        for response in responses:
            if response.type_url == types.LISTENER and self.assignments_before_listeners < 0:
                self.assignments_before_listeners = sum(
                    len(r.resources) for r in self.log if r.type_url == types.ENDPOINT
                ) if not self.in_flight[types.ENDPOINT] else 0
            self.log.append(response)
            self.in_flight[response.type_url] += 1
            self.most_in_flight[response.type_url] = max(
                self.most_in_flight[response.type_url], self.in_flight[response.type_url])
            self._queue.append(response)

    def pushed(self) -> None:
        """What the server pushes after a cache change."""
        self._take(self.stream.on_change())

    def settle(self) -> None:
        while self._queue:
            response = self._queue.popleft()
            names = tuple(r.name for r in response.resources)
            if response.type_url == types.CLUSTER and names:
                self.ask(_delta(types.ENDPOINT, names))
            if response.type_url == types.SCOPE and names:  # the tables they name
                self.ask(_delta(types.ROUTE, tuple(dict.fromkeys(map(table_of, names)))))
            self.in_flight[response.type_url] -= 1
            self.ask(_delta(response.type_url, nonce=response.nonce))

    def sizes(self, type_url: str) -> list[int]:
        return [len(r.resources) + len(r.removed_resources) for r in self.log
                if r.type_url == type_url]

    def sent(self, type_url: str) -> Counter[str]:
        return Counter(r.name for x in self.log if x.type_url == type_url for r in x.resources)


def _cold(cache: Cache) -> Envoy:
    envoy = Envoy(DeltaStream(cache))
    envoy.ask(_delta(types.CLUSTER))
    envoy.settle()
    envoy.ask(_delta(types.LISTENER))
    envoy.settle()
    envoy.ask(_delta(types.SCOPE))
    envoy.settle()
    return envoy


def test_a_cold_start_of_5000_pools_sends_assignments_and_tables_in_bounded_parts() -> None:
    cache = Cache()
    cache.set(Builder(scoped_min_hosts=3).build(_ir(N)))
    envoy = _cold(cache)
    # Envoy's init waits for exactly what the first clusters and listeners name: whole.
    assert envoy.sizes(types.CLUSTER) == [N]
    assert envoy.sizes(types.SCOPE) == [N]
    # The load assignments (each starts its members' first checks) and tables: in parts.
    eds, rds = envoy.sizes(types.ENDPOINT), envoy.sizes(types.ROUTE)
    tables = len({table_of(name) for name in cache.get(types.SCOPE).resources})
    assert tables > MAX_RESOURCES_PER_RESPONSE  # (the scopes share them: fewer than N)
    assert max(eds) == max(rds) == MAX_RESOURCES_PER_RESPONSE
    assert (sum(eds), sum(rds)) == (N, tables)
    assert envoy.most_in_flight[types.ENDPOINT] == envoy.most_in_flight[types.ROUTE] == 1
    for type_url in (types.CLUSTER, types.ENDPOINT, types.SCOPE, types.ROUTE):
        sent = envoy.sent(type_url)
        assert (len(sent), set(sent.values())) == (
            tables if type_url == types.ROUTE else N, {1}), type_url
    # Listeners still wait for every part of the load assignments to be answered.
    assert envoy.assignments_before_listeners == N


def test_a_big_update_of_a_running_engine_goes_in_parts_and_routes_wait_for_all() -> None:
    cache, builder = Cache(), Builder(scoped_min_hosts=3)
    cache.set(builder.build(_ir(10)))
    envoy = _cold(cache)
    start = len(envoy.log)
    cache.set(builder.build(_ir(SOME)))
    envoy.pushed()
    envoy.settle()
    new = envoy.log[start:]
    for type_url in (types.CLUSTER, types.ENDPOINT, types.SCOPE):
        sizes = [len(r.resources) for r in new if r.type_url == type_url]
        assert (max(sizes), sum(sizes)) == (MOST, SOME - 10), type_url
        assert envoy.most_in_flight[type_url] == 1, type_url
    # The tables the new hosts went into, each once, behind the scopes naming them.
    sizes = [len(r.resources) for r in new if r.type_url == types.ROUTE]
    touched = {table_name("listener/http", f"h{i}.ex") for i in range(10, SOME)}
    assert max(sizes) <= MOST
    assert envoy.sent(types.ROUTE).keys() >= touched
    assert sum(sizes) == len(touched)
    assert envoy.most_in_flight[types.ROUTE] == 1
    # Route tables wait for every part of the clusters and load assignments (scopes name
    # tables, not clusters: they never waited).
    last_cluster = max(i for i, r in enumerate(new) if r.type_url in (
        types.CLUSTER, types.ENDPOINT))
    assert all(i > last_cluster for i, r in enumerate(new)
               if r.type_url in (types.LISTENER, types.ROUTE))
    # Then a small change is one small response: O(change).
    start = len(envoy.log)
    cache.set(builder.build(_ir(SOME, moved=7)))
    envoy.pushed()
    envoy.settle()
    assert [(r.type_url, [x.name for x in r.resources]) for r in envoy.log[start:]] == [
        (types.ENDPOINT, ["pool/p7"])]


def test_a_bulk_removal_goes_in_bounded_parts() -> None:
    cache, builder = Cache(), Builder(scoped_min_hosts=3)
    cache.set(builder.build(_ir(SOME)))
    envoy = _cold(cache)
    start = len(envoy.log)
    cache.set(builder.build(_ir(10)))
    envoy.pushed()
    envoy.settle()
    for type_url in (types.CLUSTER, types.ENDPOINT):
        removed = [len(r.removed_resources) for r in envoy.log[start:]
                   if r.type_url == type_url]
        assert (max(removed), sum(removed)) == (MOST, SOME - 10), type_url


def test_a_new_scoped_listener_gets_every_scope_in_one_response() -> None:
    """Its new connection manager waits for the scopes of its first update only."""
    cache, builder = Cache(), Builder(scoped_min_hosts=3)
    cache.set(builder.build(_ir(SOME)))
    envoy = _cold(cache)
    start = len(envoy.log)
    cache.set(builder.build(_ir(SOME, port=8081)))
    envoy.pushed()
    envoy.settle()
    assert [(r.type_url, len(r.resources)) for r in envoy.log[start:]
            if r.type_url in (types.LISTENER, types.SCOPE)] == [
        (types.LISTENER, 1), (types.SCOPE, SOME)]


def _listeners(names: list[str], hops: int) -> IR:
    """An HTTP listener per name, each on a port of its own (``PORTS[name]``), trusting
    ``hops`` proxies in front (a setting of the listener resource itself)."""
    return ir(tuple(replace(http_listener(vhost(f"h{i}.ex", route(f"r{i}", "/", "pool/p")),
                                          port=PORTS[name]), name=name, xff_trusted_hops=hops)
                    for i, name in enumerate(names)), pool("pool/p", 9000))


PORTS = {f"l/{i:03}": 10_000 + i for i in range(SOME // 2)} | {"m/000": 10_000}


def test_a_listener_update_that_removes_one_goes_whole() -> None:
    """Envoy refuses a listener on the address of one it still has ("duplicate address"), and
    takes a removal and an add of the same address only in one response (removals first). A
    part boundary between them closed the port (removal first) or refused the new listener."""
    cache, builder = Cache(), Builder()
    old = [f"l/{i:03}" for i in range(SOME // 2)]
    cache.set(builder.build(_listeners(old, 0)))
    envoy = _cold(cache)
    start = len(envoy.log)
    # l/000 becomes m/000 on the same port (say a Gateway renamed), and every other changes.
    cache.set(builder.build(_listeners(["m/000", *old[1:]], 1)))
    envoy.pushed()
    envoy.settle()
    sent = [r for r in envoy.log[start:] if r.type_url == types.LISTENER]
    assert [(len(r.resources), list(r.removed_resources)) for r in sent] == [
        (SOME // 2, ["l/000"])]
    # Without a removal, a big listener update still goes in parts.
    start = len(envoy.log)
    cache.set(builder.build(_listeners(["m/000", *old[1:]], 2)))
    envoy.pushed()
    envoy.settle()
    assert [len(r.resources) for r in envoy.log[start:] if r.type_url == types.LISTENER] == [
        MOST, SOME // 2 - MOST]


def _refused_then_freed(error: str) -> d.DeltaDiscoveryResponse:
    """l/000 serves; m/000 on its port is refused with ``error``; then l/000 is removed: the
    listener response of that removal."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_listeners(["l/000"], 0)))
    stream = _cold(cache).stream
    cache.set(builder.build(_listeners(["l/000", "m/000"], 0)))
    (added,) = [r for r in stream.on_change() if r.type_url == types.LISTENER]
    assert [r.name for r in added.resources] == ["m/000"]
    nack = _delta(types.LISTENER, nonce=added.nonce)
    nack.error_detail.message = f"Error adding/updating listener(s) m/000: {error}"
    stream.on_request(nack)
    cache.set(builder.build(_listeners(["m/000"], 0)))
    (swap,) = [r for r in stream.on_change() if r.type_url == types.LISTENER]
    return swap


def test_a_listener_refused_for_its_address_goes_along_with_the_removal_that_frees_it() -> None:
    """m/000 was refused while l/000 held its address; the update that removes l/000 carries
    m/000 again in the same response, not after its backoff."""
    swap = _refused_then_freed("error adding listener: 'm/000' has duplicate address "
                               "'127.0.0.1:10000' as existing listener")
    assert (list(swap.removed_resources), [r.name for r in swap.resources]) == (
        ["l/000"], ["m/000"])


def test_a_listener_refused_for_anything_else_keeps_its_backoff() -> None:
    swap = _refused_then_freed("Didn't find a registered implementation for 'x'")
    assert (list(swap.removed_resources), [r.name for r in swap.resources]) == (["l/000"], [])


def test_a_listener_refused_for_anything_else_is_held_even_when_the_nack_meets_a_removal(
        ) -> None:
    """The refusal arrives when a removal is already due (the cache changed meanwhile): the
    refused listener is held, not offered again beside the removal."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_listeners(["l/000"], 0)))
    stream = _cold(cache).stream
    cache.set(builder.build(_listeners(["l/000", "m/000"], 0)))
    (added,) = [r for r in stream.on_change() if r.type_url == types.LISTENER]
    cache.set(builder.build(_listeners(["m/000"], 0)))  # not pushed yet
    nack = _delta(types.LISTENER, nonce=added.nonce)
    nack.error_detail.message = "Error adding/updating listener(s) m/000: bad filter"
    out = [r for r in stream.on_request(nack)[0] if r.type_url == types.LISTENER]
    assert [(list(r.removed_resources), [x.name for x in r.resources]) for r in out] == [
        (["l/000"], [])]
