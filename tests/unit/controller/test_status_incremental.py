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

from podway.controller.events import changes
from podway.controller.status import Desired, desired
from podway.model import Snapshot
from podway.pipeline import Rejection, State
from podway.sources.base import SourceUpdate
from podway.status.document import DocumentBuilder
from podway.translate import IncrementalTranslator, TranslateOptions, translate
from tests.unit.status.test_incremental import BASE, _apply, _parsed, _refused, steps
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
        snapshot = _apply(snapshot, step)
        result = translator.update(snapshot)
        if step[0] == "fresh":
            result = translate(snapshot, OPTS)
        elif step[0] == "refuse":
            rejections = _refused(result, rejections, step[1])
        elif step[0] == "clear":
            rejections = ()
        state = State(version=generation, generation=generation,
                      update=SourceUpdate(snapshot, ()), result=result, rejections=rejections)
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
