"""The mode gate: a switch to nodeportlocal waits for the pods' NPL entries (make before break);
a Service seen first takes its mode at once and reports pending pods."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from podway.ir import Pool
from podway.model import EndpointSlice, K8sObject, Pod, Service, Snapshot
from podway.model.base import ObjectRef
from podway.programs.controller.modes import NplPlanner, npl_plan
from podway.sources.base import SourceUpdate
from podway.sources.mode_gate import ModeGate
from podway.translate import BackendMode, TranslateOptions
from podway.translate.annotations import BACKEND_MODE
from podway.translate.pools.backends import service_mode
from tests import builders

OPTS = TranslateOptions(address="198.18.0.1")  # default: clusterip
KEY = ("ns", "web")


def service(mode: str | None = None) -> Service:
    annotations = {BACKEND_MODE.name: mode} if mode else {}
    return Service.model_validate(builders.service(
        "web", 80, None, type_="LoadBalancer", namespace="ns", annotations=annotations,
        port_name=None, protocol=None))


def pod(npl: bool) -> Pod:
    return Pod.model_validate(builders.pod(
        "p1", None, namespace="ns", npl=[(8080, "198.18.0.11", 61000)] if npl else None))


SLICE: dict[str, Any] = {
    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
    "metadata": {"name": "web-1", "namespace": "ns",
                 "labels": {"kubernetes.io/service-name": "web"}},
    "ports": [{"port": 8080}],
    "endpoints": [{"addresses": ["198.18.5.1"], "targetRef": {"kind": "Pod", "name": "p1"}}]}


def update(*objects: K8sObject, changed: tuple[tuple[str, Any], ...] | None = None
           ) -> SourceUpdate:
    snapshot = Snapshot.of_objects([EndpointSlice.model_validate(SLICE), *objects])
    return SourceUpdate(snapshot=snapshot, errors=(), changed=changed)


def mode_seen(result: SourceUpdate) -> str | None:
    """The mode the translator is told beyond its own default: the gate's decision
    (``Snapshot.backend_modes``), else the Service's annotation (None: neither)."""
    return mode_seen_of(result.snapshot, "web")


def test_switch_to_npl_is_held_until_every_ready_pod_has_its_entry() -> None:
    """Held: the translator sees the old mode and the report says so; released when the
    annotation appears, with the Service named as changed."""
    gate = ModeGate(source_never_used(), OPTS)
    gate.apply(update(service(), pod(npl=False)))
    held = gate.apply(update(service("nodeportlocal"), pod(npl=False),
                             changed=(("Service", KEY),)))
    assert mode_seen(held) == "clusterip"
    assert dict(gate.report.held) == {KEY: (BackendMode.CLUSTERIP, BackendMode.NODEPORTLOCAL)}
    assert gate.requested(held.snapshot.kind(Service)[KEY]) is BackendMode.NODEPORTLOCAL
    released = gate.apply(update(service("nodeportlocal"), pod(npl=True),
                                 changed=(("Pod", ("ns", "p1")),)))
    assert mode_seen(released) == "nodeportlocal"
    assert released.changed == (("Pod", ("ns", "p1")), ("Service", KEY))
    assert dict(gate.report.held) == {}


def test_first_sight_takes_the_mode_and_reports_pending_pods() -> None:
    """No previous mode: nodeportlocal at once, the pod without an entry is pending."""
    gate = ModeGate(source_never_used(), OPTS)
    first = gate.apply(update(service("nodeportlocal"), pod(npl=False)))
    assert mode_seen(first) == "nodeportlocal"
    assert dict(gate.report.pending) == {KEY: ("p1",)}


def test_npl_plan_enables_served_and_disables_only_its_own() -> None:
    """Served in nodeportlocal mode → enable; not anymore → disable only where marked."""
    ours = Service.model_validate({**service().model_dump(by_alias=True), "metadata": {
        "name": "old", "namespace": "ns", "annotations": {
            "nodeportlocal.antrea.io/enabled": "true", "podway.io/npl-managed": "true"}}})
    users = Service.model_validate({**service().model_dump(by_alias=True), "metadata": {
        "name": "user", "namespace": "ns", "annotations": {
            "nodeportlocal.antrea.io/enabled": "true"}}})
    plan = npl_plan([service(), ours, users], served=frozenset({KEY}),
                    requested={KEY: BackendMode.NODEPORTLOCAL})
    assert (plan.enable, plan.disable) == ((KEY,), (("ns", "old"),))


def source_never_used() -> Any:
    return object()


def test_looking_only_at_touched_services_decides_as_a_full_pass() -> None:
    """Updates with changed keys give the same modes, holds and pending pods as the same
    history seen with ``changed=None`` (every Service looked at)."""
    other = Service.model_validate({**service().model_dump(by_alias=True), "metadata": {
        "name": "other", "namespace": "ns"}})
    steps: list[tuple[tuple[K8sObject, ...], tuple[tuple[str, Any], ...]]] = [
        ((service(), other, pod(npl=False)), ()),
        ((service("nodeportlocal"), other, pod(npl=False)), (("Service", KEY),)),
        ((service("nodeportlocal"), other, pod(npl=True)), (("Pod", ("ns", "p1")),)),
        ((service("nodeportlocal"), other, pod(npl=False)), (("Pod", ("ns", "p1")),)),
        ((service("clusterip"), other, pod(npl=False)), (("Service", KEY),)),
        ((other, pod(npl=False)), (("Service", KEY),)),
    ]
    touched, full = ModeGate(source_never_used(), OPTS), ModeGate(source_never_used(), OPTS)
    for i, (objects, changed) in enumerate(steps):
        a = touched.apply(update(*objects, changed=changed if i else None))
        b = full.apply(update(*objects))
        assert a.snapshot.objects.get("Service") == b.snapshot.objects.get("Service")
        assert touched.report == full.report


def test_new_default_moves_unannotated_services_make_before_break() -> None:
    """A new default reaches Services without the annotation (the translator's own default is
    fixed: the gate hands it a copy saying the new mode); an annotated Service keeps its mode;
    a switch to nodeportlocal waits for the pods' entries like an annotation edit; back to
    the translator's default drops the copies."""
    pinned = Service.model_validate({**service("clusterip").model_dump(by_alias=True),
                                     "metadata": {"name": "pinned", "namespace": "ns",
                                                  "annotations": {BACKEND_MODE.name: "clusterip"}}})
    gate = ModeGate(source_never_used(), OPTS)
    base = gate.apply(update(service(), pinned, pod(npl=False)))
    assert mode_seen(base) is None
    gate.set_default(BackendMode.NODEPORT)
    moved = gate.apply(update(service(), pinned, pod(npl=False), changed=()))
    assert mode_seen(moved) == "nodeport"
    assert moved.changed == (("Service", KEY),)
    assert gate.requested(moved.snapshot.kind(Service)[KEY]) is BackendMode.NODEPORT
    gate.set_default(BackendMode.NODEPORTLOCAL)
    held = gate.apply(update(service(), pinned, pod(npl=False), changed=()))
    assert mode_seen(held) == "nodeport"
    assert dict(gate.report.held) == {KEY: (BackendMode.NODEPORT, BackendMode.NODEPORTLOCAL)}
    released = gate.apply(update(service(), pinned, pod(npl=True),
                                 changed=(("Pod", ("ns", "p1")),)))
    assert mode_seen(released) == "nodeportlocal"
    gate.set_default(BackendMode.CLUSTERIP)
    back = gate.apply(update(service(), pinned, pod(npl=True), changed=()))
    assert mode_seen(back) is None
    assert back.changed == (("Service", KEY),)
    assert back.snapshot.get(Service, "ns", "pinned") is pinned  # never copied


async def test_set_default_re_applies_the_last_update_at_once() -> None:
    """``watch`` yields a re-applied update when the default changes, without a source
    update; the source's own updates keep flowing."""
    source_updates: asyncio.Queue[SourceUpdate] = asyncio.Queue()

    class Source:
        async def watch(self) -> AsyncIterator[SourceUpdate]:
            while True:
                yield await source_updates.get()

    gate = ModeGate(Source(), OPTS)
    updates = gate.watch()
    await source_updates.put(update(service(), pod(npl=False)))
    first = await asyncio.wait_for(anext(updates), 5)
    assert mode_seen(first) is None
    gate.set_default(BackendMode.NODEPORT)
    again = await asyncio.wait_for(anext(updates), 5)
    assert mode_seen(again) == "nodeport"
    assert again.changed == (("Service", KEY),)
    await source_updates.put(update(service(), pod(npl=False), changed=(("Pod", ("ns", "p1")),)))
    later = await asyncio.wait_for(anext(updates), 5)
    assert mode_seen(later) == "nodeport"
    await updates.aclose()  # type: ignore[attr-defined]


def test_npl_planner_plans_as_npl_plan_state_after_state() -> None:
    """The planner judges again only what changed, yet every plan equals ``npl_plan`` from
    scratch: a Service edited, a pool made from a Service appearing and going, the default
    mode switched (which changes the request of every Service without the annotation)."""
    def svc(name: str, mode: str | None = None, **annotations: str) -> Service:
        return Service.model_validate({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns",
                         "annotations": {**({BACKEND_MODE.name: mode} if mode else {}),
                                         **annotations}},
            "spec": {"ports": [{"port": 80}]}})

    made = {n: Pool(name=f"pool/ns/{n}/80", origin=ObjectRef("Service", "ns", n))
            for n in "abcd"}  # the same objects from state to state, as the translator keeps

    def pools(*names: str) -> dict[str, Pool]:
        return {made[n].name: made[n] for n in names}

    ours = {"nodeportlocal.antrea.io/enabled": "true", "podway.io/npl-managed": "true"}
    steps: list[tuple[dict[str, Service], dict[str, Pool], BackendMode]] = []
    services = {"a": svc("a", "nodeportlocal"), "b": svc("b"), "c": svc("c", **ours),
                "d": svc("d")}
    steps.append((dict(services), pools("a", "d"), BackendMode.CLUSTERIP))
    services["b"] = svc("b", "nodeportlocal")  # edited: asks for NPL, not served yet
    steps.append((dict(services), pools("a", "d"), BackendMode.CLUSTERIP))
    steps.append((dict(services), pools("a", "b", "d"), BackendMode.CLUSTERIP))  # b served
    steps.append((dict(services), pools("a", "b", "d"), BackendMode.NODEPORTLOCAL))  # default
    services["a"] = svc("a", "nodeportlocal", **ours)  # the watch shows the annotation
    del services["b"]
    steps.append((dict(services), pools("a", "c", "d"), BackendMode.NODEPORTLOCAL))
    planner = NplPlanner()
    plans = []
    for services_now, pools_now, default in steps:
        opts = TranslateOptions(address="198.18.0.1", mode=default)
        by_key = {s.key: s for s in services_now.values()}
        want = npl_plan(by_key.values(), served=frozenset(
            (p.origin.namespace, p.origin.name) for p in pools_now.values()
            if p.origin is not None),
            requested={k: service_mode(s, opts) for k, s in by_key.items()})
        got = planner.plan(by_key, pools_now, requested=lambda s, o=opts: service_mode(s, o),
                           default=default, held={})
        assert got == want
        plans.append(got)
    assert plans[0].enable == (("ns", "a"),)
    assert plans[0].disable == (("ns", "c"),)
    assert plans[1].enable == (("ns", "a"),)
    assert plans[2].enable == (("ns", "a"), ("ns", "b"))
    assert plans[3].enable == (("ns", "a"), ("ns", "b"), ("ns", "d"))
    assert (plans[4].enable, plans[4].disable) == ((("ns", "d"),), ())


def test_services_handed_on_follow_the_change_and_stay_the_same_map_otherwise() -> None:
    """With copies in (a new default reaches every unannotated Service), the Services handed
    on equal those of a gate that looks at everything, after Services edited, added and
    deleted; an update that moves no Service (a Pod changed) hands on the very same map, so
    readers that skip unchanged maps by identity still do."""
    def named(name: str, mode: str | None = None) -> Service:
        """``mode``: "MODE" or "MODE:PORT" (the annotation, and another port than 80)."""
        mode, _, port = (mode or "").partition(":")
        annotations = {BACKEND_MODE.name: mode} if mode else {}
        return Service.model_validate({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
            "spec": {"type": "LoadBalancer", "ports": [{"port": int(port or 80)}]}})

    services = {("ns", f"s{i}"): named(f"s{i}") for i in range(5)}
    touched, full = ModeGate(source_never_used(), OPTS), ModeGate(source_never_used(), OPTS)
    pods = {("ns", "p1"): pod(npl=False)}
    steps: list[tuple[str, str, str | None]] = [
        ("default", "", "nodeport"), ("pod", "", None), ("edit", "s1", "clusterip"),
        ("edit", "s3", "clusterip:81"), ("edit", "s3", "clusterip:82"),  # no copy moves
        ("pod", "", None), ("add", "s7", None), ("delete", "s2", None),
        ("edit", "s1", None), ("default", "", "nodeportlocal"),  # only copies move
        ("pod", "", None), ("default", "", "clusterip"), ("default", "", "nodeport"),
        ("pod", "", None)]
    before = None
    for i, (action, name, arg) in enumerate([("first", "", None), *steps]):
        changed: tuple[tuple[str, Any], ...] = ()
        services, pods = dict(services), dict(pods)
        if action == "default":
            touched.set_default(BackendMode(arg))
            full.set_default(BackendMode(arg))
        elif action == "pod":
            pods[("ns", "p1")] = pod(npl=i % 2 == 0)
            changed = (("Pod", ("ns", "p1")),)
        elif action in ("edit", "add"):
            services[("ns", name)] = named(name, arg)
            changed = (("Service", ("ns", name)),)
        elif action == "delete":
            del services[("ns", name)]
            changed = (("Service", ("ns", name)),)
        snapshot = Snapshot({"Service": services, "Pod": pods})
        a = touched.apply(SourceUpdate(snapshot, (), changed=changed if i else None))
        b = full.apply(SourceUpdate(snapshot, ()))
        assert dict(a.snapshot.kind(Service)) == dict(b.snapshot.kind(Service))
        assert dict(a.snapshot.backend_modes) == dict(b.snapshot.backend_modes)
        if action == "pod" and before is not None:
            assert a.snapshot.kind(Service) is before.kind(Service)
            assert a.snapshot.backend_modes is before.backend_modes
        before = a.snapshot
    assert before is not None
    assert mode_seen_of(before, "s0") == "nodeport"


def mode_seen_of(snapshot: Snapshot, name: str) -> str | None:
    decided = snapshot.backend_modes.get(("ns", name))
    seen = snapshot.get(Service, "ns", name)
    assert seen is not None
    return decided if decided is not None else seen.metadata.annotations.get(BACKEND_MODE.name)


def test_the_users_annotation_is_never_rewritten_and_the_mode_reaches_the_translator() -> None:
    """Held back, released and moved by a new default, the Service the translator gets carries
    the user's annotations as written; the effective mode reaches it as ``backend_modes``, and
    the incremental translator's members follow it as a whole translation's do."""
    from podway.translate import IncrementalTranslator, translate

    def annotated(mode: str | None) -> Service:
        svc = service(mode)
        notes = {**svc.metadata.annotations, "nodeportlocal.antrea.io/enabled": "true"}
        return svc.model_copy(update={"metadata": svc.metadata.model_copy(
            update={"annotations": notes})})

    def members(snapshot: Snapshot, translator: IncrementalTranslator,
                changed: tuple[tuple[str, Any], ...] | None) -> set[tuple[str, int]]:
        result = translator.update(snapshot, changed)
        assert result.ir == translate(snapshot, OPTS).ir  # incremental = whole
        return {(m.address, m.port) for p in result.ir.pools.values() for m in p.members}

    gate, translator = ModeGate(source_never_used(), OPTS), IncrementalTranslator(OPTS)
    pod_ip, npl_port = {("198.18.5.1", 8080)}, {("198.18.0.11", 61000)}
    steps: list[tuple[Service, Pod, BackendMode | None, set[tuple[str, int]]]] = [
        (annotated(None), pod(npl=False), None, pod_ip),
        (annotated("nodeportlocal"), pod(npl=False), None, pod_ip),  # held: no NPL entry yet
        (annotated("nodeportlocal"), pod(npl=True), None, npl_port),  # released
        (annotated(None), pod(npl=True), None, pod_ip),  # back to the default
        (annotated(None), pod(npl=True), BackendMode.NODEPORTLOCAL, npl_port),  # new default
    ]
    for i, (svc, the_pod, default, expected) in enumerate(steps):
        if default is not None:
            gate.set_default(default)
        changed = (("Service", KEY), ("Pod", ("ns", "p1"))) if i else None
        out = gate.apply(update(svc, the_pod, changed=changed))
        handed = out.snapshot.get(Service, *KEY)
        assert handed is not None
        assert dict(handed.metadata.annotations) == dict(svc.metadata.annotations), i
        assert members(out.snapshot, translator, out.changed) == expected, i
    assert dict(out.snapshot.backend_modes) == {KEY: "nodeportlocal"}  # the new default
