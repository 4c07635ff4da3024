"""The incremental status document equals the document built from scratch, over random changes.

``DocumentBuilder`` recomputes only the entries whose inputs changed (found by identity); that
must be invisible: after every step of a random sequence (objects put, replaced by an equal copy
or deleted; engine refusals added or cleared; a translation from scratch instead of the
incremental one, so no identity is kept) its document equals ``build`` of the same inputs, its
unchanged entries are the very same objects, and ``changed_since`` names exactly the entries
that differ from the previous document.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podway.envoy import types
from podway.model import K8sObject, Snapshot
from podway.model.base import ObjectRef
from podway.model.loader import parse_object
from podway.model.snapshot import Key
from podway.pipeline import Rejection
from podway.status import StatusDocument, build
from podway.status.incremental import DocumentBuilder
from podway.translate import (
    IncrementalTranslator,
    Problem,
    Reason,
    Result,
    Severity,
    TranslateOptions,
    translate,
)
from tests.unit.translate.gateway_strategies import (
    OUR_CLASS,
    gateway,
    http_route,
    l4_route,
    one_listener_world,
    route_to,
)
from tests.unit.translate.strategies import endpoint_slice, ingress, service

OPTS = TranslateOptions(address="198.18.0.1")


# Always there: a Gateway random routes attach to, and a Service with an error whose
# ``accepted`` flips when a route makes a pool of it (served) — an entry that changes with
# another object.
BASE: list[dict[str, Any]] = [OUR_CLASS, {
    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
    "metadata": {"name": "gw", "namespace": "default"},
    "spec": {"gatewayClassName": "podway",
             "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}, {
    "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
    "spec": {"type": "LoadBalancer", "loadBalancerIP": "999.1.1.1", "ports": [{"port": 80}]}}]


def _parsed(doc: Any) -> K8sObject | None:
    obj, _ = parse_object(doc)
    return obj


_put = st.one_of(http_route(), http_route(), l4_route(), gateway(), service(), service(),
                 ingress(), endpoint_slice()).map(lambda d: ("put", d))
_index = st.integers(0, 1_000)
steps = st.lists(st.one_of(
    _put, _put, _put,
    _index.map(lambda i: ("delete", i)),
    _index.map(lambda i: ("touch", i)),  # the same content, a new object
    st.tuples(_index, st.sampled_from([types.LISTENER, types.ROUTE, types.CLUSTER])).map(
        lambda t: ("refuse", t)),
    st.just(("clear", None)),
    st.just(("fresh", None)),  # this step's result translated from scratch: new identities
), min_size=1, max_size=14)


def _apply(snapshot: Snapshot, step: tuple[str, Any]) -> Snapshot:
    action, arg = step
    if action == "put":
        obj = _parsed(arg)
        return snapshot if obj is None else snapshot.replace(obj.KIND, {obj.key: obj})
    if action not in ("delete", "touch"):
        return snapshot
    every = sorted(((o.KIND, o.key) for o in snapshot.all()), key=str)
    if not every:
        return snapshot
    kind, key = every[arg % len(every)]
    if action == "delete":
        return snapshot.replace(kind, {key: None})
    return snapshot.replace(kind, {key: snapshot.objects[kind][key].model_copy()})


def _names(result: Result, type_url: str) -> list[str]:
    if type_url == types.CLUSTER:
        return sorted(result.ir.pools)
    return [ls.name for ls in result.ir.listeners]


def _refused(result: Result, rejections: tuple[Rejection, ...], arg: tuple[int, str]
             ) -> tuple[Rejection, ...]:
    index, type_url = arg
    names = _names(result, type_url)
    name = names[index % len(names)] if names else f"gone-{index}"
    new = Rejection(node="edge-1", type_url=type_url, resource=name, version="v1",
                    message=f"refused {name}")
    return tuple(sorted({*rejections, new}, key=lambda r: (r.type_url, r.resource)))


def _changed(before: Snapshot, after: Snapshot) -> list[tuple[str, Key]]:
    return [(kind, key) for kind in before.objects.keys() | after.objects.keys()
            for key in before.objects.get(kind, {}).keys() | after.objects.get(kind, {}).keys()
            if before.objects.get(kind, {}).get(key) is not after.objects.get(kind, {}).get(key)]


def _differing(before: StatusDocument, after: StatusDocument) -> set[ObjectRef]:
    return {ref for ref in before.objects.keys() | after.objects.keys()
            if before.objects.get(ref) != after.objects.get(ref)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(http_route(), service(), gateway(), ingress()), max_size=8), steps)
def test_incremental_document_equals_from_scratch(start: list[Any],
                                                  sequence: list[tuple[str, Any]]) -> None:
    objects = [o for o in map(_parsed, [*BASE, *start]) if o is not None]
    snapshot = Snapshot.of_objects(objects)
    translator = IncrementalTranslator(OPTS)
    builder = DocumentBuilder()
    rejections: tuple[Rejection, ...] = ()
    result = translator.update(snapshot)
    before = builder.build(snapshot=snapshot, result=result)
    assert before == build(snapshot=snapshot, result=result)
    for generation, step in enumerate(sequence, start=1):
        previous, snapshot = snapshot, _apply(snapshot, step)
        # Every other step says what changed, as a source does (``SourceUpdate.changed``).
        hint = _changed(previous, snapshot) if generation % 2 else None
        result, rejections = step_result(translator, snapshot, step, rejections)
        got = builder.build(snapshot=snapshot, result=result, rejections=rejections,
                            generation=generation, changed=hint)
        want = build(snapshot=snapshot, result=result, rejections=rejections,
                     generation=generation)
        assert got == want
        assert got.to_data() == want.to_data()
        assert got.changed_since(before) == frozenset(_differing(before, got))
        assert all(before.objects.get(ref) is entry for ref, entry in got.objects.items()
                   if ref not in got.changed)  # unchanged entries are kept, not rebuilt
        assert want.changed_since(got) is None  # another lineage: unknown, compare all
        before = got


def step_result(translator: IncrementalTranslator, snapshot: Snapshot, step: tuple[str, Any],
                rejections: tuple[Rejection, ...]
                ) -> tuple[Result, tuple[Rejection, ...]]:
    """``snapshot`` translated after ``step`` (incrementally, or from scratch for "fresh"),
    and the rejections then ("refuse" adds some of the result's, "clear" drops them all)."""
    result = translator.update(snapshot)
    if step[0] == "fresh":
        result = translate(snapshot, OPTS)
    elif step[0] == "refuse":
        rejections = _refused(result, rejections, step[1])
    elif step[0] == "clear":
        rejections = ()
    return result, rejections


def test_one_new_route_changes_one_entry_and_reuses_the_others() -> None:
    """A new HTTPRoute among others: the document says that route changed (and the Gateway,
    whose attachedRoutes grew); every other entry is the same object as before."""
    docs = one_listener_world(6)
    snapshot = Snapshot.of_objects(o for o in map(_parsed, docs) if o is not None)
    translator, builder = IncrementalTranslator(OPTS), DocumentBuilder()
    first = builder.build(snapshot=snapshot, result=translator.update(snapshot))
    new = _parsed(route_to("extra", "s0"))
    assert new is not None
    snapshot = snapshot.replace(new.KIND, {new.key: new})
    second = builder.build(snapshot=snapshot,
                           result=translator.update(snapshot, [(new.KIND, new.key)]))
    assert second.changed_since(first) == frozenset({ObjectRef("HTTPRoute", "default", "extra"),
                                                     ObjectRef("Gateway", "default", "gw")})
    assert second.objects[ObjectRef("HTTPRoute", "default", "extra")].front
    assert all(second.objects[ref] is entry for ref, entry in first.objects.items()
               if ref.name != "gw")


def test_entries_that_change_with_other_objects_and_refusals_are_redone() -> None:
    """A Service with an error becomes accepted when a route serves it (its own object
    unchanged), and an object an engine refused is accepted again once the refusal clears."""
    snapshot = Snapshot.of_objects(o for o in map(_parsed, BASE[2:]) if o is not None)
    translator, builder = IncrementalTranslator(OPTS), DocumentBuilder()
    web = ObjectRef("Service", "default", "web")
    first = builder.build(snapshot=snapshot, result=translator.update(snapshot))
    assert not first.objects[web].accepted
    for doc in [*BASE[:2], route_to("r", "web")]:
        obj = _parsed(doc)
        assert obj is not None
        snapshot = snapshot.replace(obj.KIND, {obj.key: obj})
    result = translator.update(snapshot)
    served = builder.build(snapshot=snapshot, result=result)
    assert served.objects[web].accepted
    assert web in served.changed_since(first)  # type: ignore[operator]
    refused = Rejection(node="edge-1", type_url=types.CLUSTER, resource="pool/default/web/80",
                        version="v1", message="no")
    assert result.ir.pools.get(refused.resource) is not None
    steps = [(refused,), ()]
    for rejections in steps:
        got = builder.build(snapshot=snapshot, result=result, rejections=rejections)
        assert got == build(snapshot=snapshot, result=result, rejections=rejections)
        assert got.objects[web].accepted is not bool(rejections)


def test_problems_that_come_and_go_alone_redo_their_entries() -> None:
    """Problems added, removed, reordered and listed twice while the objects, statuses and IR
    stay (the translator keeps unchanged problems as the same objects): every document equals
    ``build`` from scratch, and names the entries whose problems moved."""
    snapshot = Snapshot.of_objects(o for o in map(_parsed, [*BASE, route_to("r", "web")])
                                   if o is not None)
    result = IncrementalTranslator(OPTS).update(snapshot)
    web = ObjectRef("Service", "default", "web")
    route = ObjectRef("HTTPRoute", "default", "r")
    a = Problem(ref=web, reason=Reason.INVALID_ADDRESS, message="a", severity=Severity.WARNING)
    b = Problem(ref=route, reason=Reason.INVALID_ADDRESS, message="b")
    c = Problem(ref=web, reason=Reason.INVALID_ADDRESS, message="c")
    builder = DocumentBuilder()
    before = builder.build(snapshot=snapshot, result=result)
    base = result.problems
    for extra, moved in [((a,), {web}), ((a, b), {route}), ((b, a, c), {web}),
                         ((a, c), {route}), ((c, a), {web}), ((a, a, c), {web}), ((c,), {web}),
                         ((), {web})]:
        changed = Result(ir=result.ir, problems=(*base, *extra), statuses=result.statuses)
        got = builder.build(snapshot=snapshot, result=changed)
        assert got == build(snapshot=snapshot, result=changed)
        assert got.changed_since(before) == frozenset(moved)
        before = got
