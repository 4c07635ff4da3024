"""The status writer's and the event writer's readers of a state work on the change alone, and
decide as from scratch.

Over random sequences of changes (``tests.unit.status.test_incremental``'s steps: objects put,
replaced, deleted; refusals; from-scratch translations), with the status document built
incrementally: ``Desired.update`` keeps exactly ``desired`` of the state and names every target
whose status differs; ``changes`` between two successive documents (comparing only the entries
the newer one says changed) gives the same events as comparing every entry.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podway.ir import IR, Listener, ListenerProtocol
from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.pipeline import Rejection, State
from podway.programs.controller.events import changes
from podway.programs.controller.status_desired import (
    BoundAddresses,
    Desired,
    bound_addresses,
    desired,
)
from podway.sources.base import SourceUpdate
from podway.status.incremental import DocumentBuilder
from podway.translate import IncrementalTranslator, TranslateOptions
from tests.unit.status.test_incremental import (
    BASE,
    _apply,
    _changed,
    _parsed,
    step_result,
    steps,
)
from tests.unit.translate.gateway_strategies import gateway, http_route
from tests.unit.translate.strategies import ingress, service

OPTS = TranslateOptions(address="0.0.0.0")  # listeners on the wildcard: --lb-address shows
LB = "198.18.0.100"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(http_route(), service(), gateway(), ingress()), max_size=8), steps)
def test_desired_and_events_follow_the_change_as_from_scratch(
        start: list[Any], sequence: list[tuple[str, Any]]) -> None:
    snapshot = Snapshot.of_objects(o for o in map(_parsed, [*BASE, *start]) if o is not None)
    translator = IncrementalTranslator(OPTS)
    documents = DocumentBuilder()
    wanted = Desired(opts=OPTS, lb_address=LB)
    rejections: tuple[Rejection, ...] = ()
    previous: dict[Any, Any] = {}
    before = None
    for generation, step in enumerate([("first", None), *sequence], start=1):
        previous_snapshot, snapshot = snapshot, _apply(snapshot, step)
        # Every other step says what changed, as a source does (``SourceUpdate.changed``).
        hint = tuple(_changed(previous_snapshot, snapshot)) if generation % 2 else None
        result, rejections = step_result(translator, snapshot, step, rejections)
        state = State(version=generation, generation=generation,
                      update=SourceUpdate(snapshot, (), changed=hint), result=result,
                      rejections=rejections)
        doc = documents.of_state(state)
        touched = wanted.update(doc, state)
        want = desired(doc, state, opts=OPTS, lb_address=LB)
        assert dict(wanted.want) == want
        differing = {t for t in want.keys() | previous.keys() if want.get(t) != previous.get(t)}
        assert differing <= touched
        previous = want
        whole = replace(doc, basis=0)  # no lineage: every entry is compared
        assert changes(before, doc) == changes(before, whole)
        before = doc


def test_desired_follows_objects_whose_entries_stay_the_same() -> None:
    """An Ingress Podway takes once its IngressClass appears (the Ingress unchanged) gets its
    status; a LoadBalancer Service turned ClusterIP (its entry the same: accepted, no problem)
    loses the one Podway wrote."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb", "namespace": "shop"},
         "spec": {"type": "LoadBalancer", "ports": [{"port": 9000}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
         "spec": {"ports": [{"port": 80}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
         "metadata": {"name": "shop", "namespace": "shop"},
         "spec": {"ingressClassName": "mine", "rules": [{"host": "shop.test", "http": {
             "paths": [{"path": "/", "pathType": "Prefix", "backend": {
                 "service": {"name": "web", "port": {"number": 80}}}}]}}]}}]
    more = [
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
         "metadata": {"name": "mine"}, "spec": {"controller": "podway.io/ingress-controller"}},
        {**docs[0], "spec": {"type": "ClusterIP", "ports": [{"port": 9000}]}}]
    snapshot = Snapshot.of_objects(o for o in map(_parsed, docs) if o is not None)
    translator, documents = IncrementalTranslator(OPTS), DocumentBuilder()
    wanted = Desired(opts=OPTS, lb_address=LB)
    seen = []
    for generation, doc in enumerate([None, *more], start=1):
        if doc is not None:
            snapshot = _apply(snapshot, ("put", doc))
        state = State(version=generation, generation=generation,
                      update=SourceUpdate(snapshot, ()), result=translator.update(snapshot))
        document = documents.of_state(state)
        wanted.update(document, state)
        assert dict(wanted.want) == desired(document, state, opts=OPTS, lb_address=LB)
        seen.append(set(wanted.want))
    ingress, lb = ("Ingress", ("shop", "shop")), ("Service", ("shop", "lb"))
    assert ingress not in seen[0]
    assert lb in seen[0]
    assert ingress in seen[1]
    assert lb not in seen[2]


_ORIGINS = [ObjectRef("Service", "ns", "a"), ObjectRef("Service", "ns", "b"),
            ObjectRef("Ingress", "ns", "c"), ObjectRef("Gateway", "ns", "d")]
_listener = st.builds(
    lambda name, address, port, origins: Listener(
        name=name, address=address, port=port, protocol=ListenerProtocol.TCP,
        origins=tuple(origins)),
    st.sampled_from(["l1", "l2", "l3"]), st.sampled_from(["0.0.0.0", "198.18.0.1",
                                                          "198.18.0.2"]),
    st.sampled_from([80, 443]), st.lists(st.sampled_from(_ORIGINS), max_size=2, unique=True))
# a step: a listener put at a position (a new object), one removed, or two swapped
_listener_step = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 5), _listener),
    st.tuples(st.just("remove"), st.integers(0, 5), st.none()),
    st.tuples(st.just("swap"), st.integers(0, 5), st.none()))


@given(st.lists(_listener_step, max_size=16))
def test_bound_addresses_follow_the_listeners_replaced(
        sequence: list[tuple[str, int, Listener | None]]) -> None:
    """Over listeners added, removed, replaced and reordered (the others kept as the same
    objects, one sometimes listed twice), ``BoundAddresses`` equals ``bound_addresses`` from
    scratch, in listener order, and names every target whose addresses changed."""
    listeners: list[Listener] = []
    tracked = BoundAddresses()
    before: dict[Any, list[str]] = {}
    for action, at, listener in sequence:
        if action == "put" and listener is not None:
            listeners.insert(at % (len(listeners) + 1), listener)
        elif listeners and action == "remove":
            listeners.pop(at % len(listeners))
        elif listeners and action == "swap":
            i = at % len(listeners)
            listeners[0], listeners[i] = listeners[i], listeners[0]
            if at == 5:
                listeners.append(listeners[0])  # the same object twice
        moved = tracked.update(tuple(listeners))
        want = bound_addresses(IR(listeners=tuple(listeners)))
        assert tracked.bound == want
        assert moved == {t for t in want.keys() | before.keys() if want.get(t) != before.get(t)}
        before = want
