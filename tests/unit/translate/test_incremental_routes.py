"""Incremental translation and building equal a translation and a build from scratch, over
random sequences of route (and Gateway, Service, grant, policy) additions, changes and deletions;
route tables joined from per-virtual-host parts are byte-equal to the table encoded whole.

The incremental translator reuses per-route parts (``translate.gateway.memo``) and the builder
reuses per-virtual-host encodings (``envoy_config.routes.TableEncoder``); both must be invisible:
after every step the IR, problems, statuses and every Envoy resource's bytes are the same as
what a fresh ``translate`` and ``build`` of the same snapshot give.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podway.envoy import types
from podway.envoy.config import Builder, build
from podway.envoy.config.routes import route_configurations
from podway.envoy.config.scoped import SCOPED_MIN_HOSTS
from podway.envoy.xds.cache import Cache, Change
from podway.ir import IR, ListenerProtocol
from podway.model import K8sObject, Snapshot
from podway.model.loader import parse_object
from podway.readers.render.report import report_yaml
from podway.translate import IncrementalTranslator, Result, TranslateOptions, translate, translator

from .gateway_strategies import (
    OUR_CLASS,
    gateway,
    http_route,
    l4_route,
    listener_set,
    one_listener_world,
    policy_and_grant,
    route_to,
)
from .strategies import service

OPTS = TranslateOptions(address="198.18.0.1")


def _parsed(doc: Any) -> K8sObject | None:
    obj, _ = parse_object(doc)
    return obj


GROUP = "gateway.networking.k8s.io"
NAMESPACES = st.sampled_from(["default", "default", "shop"])
HOSTS = st.sampled_from(["a.example.com", "b.example.com", "*.example.com", "x.a.example.com",
                         "*", "c.test"])
SERVICES = st.sampled_from(["s0", "s1", "s2", "gone"])


def _listener(name: str, port: int, hostname: str | None, allowed: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "protocol": "HTTP", "port": port,
                           "allowedRoutes": {"namespaces": {"from": allowed}}}
    if hostname is not None:
        out["hostname"] = hostname
    return out


# Gateways that routes attach to: one of a few listener sets, so a step can change the epoch.
gateways = st.sampled_from([
    [_listener("http", 80, None, "All")],
    [_listener("http", 80, None, "All"), _listener("a", 80, "*.example.com", "Same")],
    [_listener("http", 80, "a.example.com", "All"), _listener("alt", 8080, None, "All")],
]).map(lambda ls: {"apiVersion": f"{GROUP}/v1", "kind": "Gateway",
                   "metadata": {"name": "gw", "namespace": "default"},
                   "spec": {"gatewayClassName": "podway", "listeners": ls}})
backend = st.fixed_dictionaries({"name": SERVICES, "port": st.sampled_from([80, 80, 81])},
                                optional={"weight": st.integers(0, 3),
                                          "namespace": NAMESPACES})
match = st.fixed_dictionaries({}, optional={
    "path": st.fixed_dictionaries({"type": st.sampled_from(["Exact", "PathPrefix"]),
                                   "value": st.sampled_from(["/", "/a", "/a/b"])}),
    "method": st.sampled_from(["GET", "POST"])})
rule = st.fixed_dictionaries({}, optional={
    "matches": st.lists(match, max_size=2),
    "backendRefs": st.lists(backend, max_size=2),
    "filters": st.sampled_from([[], [{"type": "RequestMirror", "requestMirror": {
        "backendRef": {"name": "s1", "port": 80}}}], [{"type": "ExtensionRef"}]])})
routes = st.fixed_dictionaries({
    "apiVersion": st.just(f"{GROUP}/v1"),
    "kind": st.sampled_from(["HTTPRoute", "HTTPRoute", "GRPCRoute"]),
    "metadata": st.fixed_dictionaries({"name": st.sampled_from(["r0", "r1", "r2", "r3"]),
                                       "namespace": NAMESPACES}, optional={
        "creationTimestamp": st.sampled_from(["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]),
        "generation": st.integers(1, 3)}),
    "spec": st.fixed_dictionaries({
        "parentRefs": st.lists(st.fixed_dictionaries({"name": st.sampled_from(
            ["gw", "gw", "gw2"])}, optional={
            "namespace": st.just("default"),
            "sectionName": st.sampled_from(["http", "a", "alt"])}), min_size=1, max_size=2)},
        optional={"hostnames": st.lists(HOSTS, max_size=2),
                  "rules": st.lists(rule, max_size=2)})})
services = st.fixed_dictionaries({
    "apiVersion": st.just("v1"), "kind": st.just("Service"),
    "metadata": st.fixed_dictionaries({"name": SERVICES, "namespace": NAMESPACES}),
    "spec": st.fixed_dictionaries({"ports": st.sampled_from([
        [{"port": 80}], [{"port": 80, "appProtocol": "h2c"}], [{"port": 81}]])})})
# Another implementation's Gateway: not translated, but a route naming it finds it exists.
foreign = st.just({"apiVersion": f"{GROUP}/v1", "kind": "Gateway",
                   "metadata": {"name": "gw2", "namespace": "default"},
                   "spec": {"gatewayClassName": "other", "listeners": [
                       {"name": "http", "protocol": "HTTP", "port": 80}]}})
grants = st.just({"apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant",
                  "metadata": {"name": "g", "namespace": "shop"},
                  "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute",
                                     "namespace": "default"}],
                           "to": [{"group": "", "kind": "Service"}]}})
world = st.lists(st.one_of(routes, routes, services, services, gateways), max_size=12)

# One step: put an object (new or replacing one of the same kind and name) or delete one.
_put = st.one_of(routes, routes, routes, services, gateways, grants, foreign, http_route(),
                 l4_route(),
                 gateway(), service(), policy_and_grant(), listener_set()
                 ).map(lambda d: ("put", d))
_delete = st.integers(0, 1_000).map(lambda i: ("delete", i))
_touch = st.integers(0, 1_000).map(lambda i: ("touch", i))  # the same content, a new object
steps = st.lists(st.one_of(_put, _put, _delete, _touch), min_size=1, max_size=12)


def _apply(snapshot: Snapshot, step: tuple[str, Any]) -> tuple[Snapshot, tuple[str, Any] | None]:
    action, arg = step
    if action == "put":
        obj = _parsed(arg)
        if obj is None:
            return snapshot, None
        return snapshot.replace(obj.KIND, {obj.key: obj}), (obj.KIND, obj.key)
    every = sorted(((o.KIND, o.key) for o in snapshot.all()), key=str)
    if not every:
        return snapshot, None
    kind, key = every[arg % len(every)]
    if action == "delete":
        return snapshot.replace(kind, {key: None}), (kind, key)
    current = snapshot.objects[kind][key]
    return snapshot.replace(kind, {key: current.model_copy()}), (kind, key)


def _digests(resources: Any) -> dict[str, dict[str, str]]:
    return {t: {n: r.digest for n, r in by_name.items()} for t, by_name in resources.items()}


class _Run:
    """An incremental translator and builder, with a cache given the builder's hint and one
    not, checked against translating and building from scratch at each ``step``."""

    def __init__(self, snapshot: Snapshot, scoped_min: int = SCOPED_MIN_HOSTS) -> None:
        self.scoped_min = scoped_min
        self.inc = IncrementalTranslator(OPTS)
        self.builder = Builder(scoped_min_hosts=scoped_min)
        self.hinted, self.plain = Cache(), Cache()
        first = self.builder.build(self.inc.update(snapshot).ir)
        self.hinted.set(first, hint=self.builder.hint)
        self.plain.set(first)

    def step(self, snapshot: Snapshot, changes: list[tuple[str, Any]]) -> tuple[Any, Result]:
        """Apply ``changes``; the incremental results equal the from-scratch ones (IR, pool
        order, problems, statuses, resource digests, whole tables, what each cache saw)."""
        got = self.inc.update(snapshot, changes)
        want = translate(snapshot, OPTS)
        assert got.ir == want.ir
        assert list(got.ir.pools) == list(want.ir.pools)  # the same order, too
        assert report_yaml(got) == report_yaml(want)
        assert dict(got.statuses) == dict(want.statuses)
        built = self.builder.build(got.ir, got.change)
        assert _digests(built) == _digests(build(want.ir, scoped_min_hosts=self.scoped_min))
        whole = _whole_tables(want.ir)  # (the one-host tables of scopes come besides)
        assert {n: b for n, b in _tables(built).items() if n in whole} == whole
        hinted, plain = self.hinted, self.plain
        assert _changed(hinted.set(built, hint=self.builder.hint)) == _changed(plain.set(built))
        assert all(_digests({t: hinted.get(t).resources}) == _digests({t: plain.get(t).resources})
                   for t in types.PUSH_ORDER)
        return built, got


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world, steps)
def test_incremental_equals_from_scratch(start: list[Any], sequence: list[Any]) -> None:
    """After each change, incremental translate + memoised build == translate + build."""
    run_sequence(start, sequence)


def run_sequence(start: list[Any], sequence: list[Any],
                 scoped_min: int = SCOPED_MIN_HOSTS) -> None:
    """``start``'s objects, then each step of ``sequence``, checked by ``_Run.step``."""
    objects = {}
    for doc in [OUR_CLASS, *start]:
        obj = _parsed(doc)
        if obj is not None:
            objects[(obj.KIND, obj.key)] = obj
    snapshot = Snapshot.of_objects(objects.values())
    run = _Run(snapshot, scoped_min)
    for step in sequence:
        snapshot, changed = _apply(snapshot, step)
        built, got = run.step(snapshot, [changed] if changed is not None else [])
        event(f"scopes: {bool(built[types.SCOPE])}, patched: {got.change is not None}")


def _changed(changes: dict[str, Change]) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    return {t: (c.updated, c.removed) for t, c in changes.items()}


def _tables(resources: Any) -> dict[str, bytes]:
    return {name: r.packed.value for name, r in resources[types.ROUTE].items()}


def _whole_tables(ir: IR) -> dict[str, bytes]:
    """Every route table encoded whole (not joined from per-virtual-host parts)."""
    persistence = {name: pool.settings.persistence for name, pool in ir.pools.items()
                   if pool.settings.persistence is not None}
    return {config.name: config.SerializeToString(deterministic=True)
            for listener in ir.listeners
            if listener.protocol in (ListenerProtocol.HTTP, ListenerProtocol.HTTPS)
            and (listener.protocol is ListenerProtocol.HTTP or listener.certificates
                 or listener.l4_routes)
            for config in route_configurations(listener, persistence=persistence)}


def test_a_route_change_reuses_every_other_virtual_host() -> None:
    """Adding one HTTPRoute leaves every other virtual host the very same object (so the
    builder re-encodes only the new one) and every other route's status the same object."""
    docs = one_listener_world(5)
    snapshot = Snapshot.of_objects(o for o in map(_parsed, docs) if o is not None)
    inc = IncrementalTranslator(OPTS)
    before = inc.update(snapshot)
    new = _parsed(_route(4, name="extra", host="extra.example.com"))
    assert new is not None
    snapshot = snapshot.replace(new.KIND, {new.key: new})
    after = inc.update(snapshot, [(new.KIND, new.key)])
    old_hosts = {v.hostname: v for ls in before.ir.listeners for v in ls.virtual_hosts}
    new_hosts = {v.hostname: v for ls in after.ir.listeners for v in ls.virtual_hosts}
    assert set(new_hosts) - set(old_hosts) == {"extra.example.com"}
    assert all(new_hosts[h] is v for h, v in old_hosts.items())
    assert all(after.statuses[ref] is status for ref, status in before.statuses.items()
               if ref.kind == "HTTPRoute")
    want = translate(snapshot, OPTS)
    assert after.ir == want.ir
    assert report_yaml(after) == report_yaml(want)


def _route(i: int, *, name: str | None = None, host: str | None = None) -> dict[str, Any]:
    return route_to(name or f"r{i}", f"s{i}", host or f"r{i}.example.com")


# Route and Service changes on exact hostnames: the structure is patched (``translate.delta``),
# not re-run, so these sequences exercise the patch rather than its refusals. Services vary in
# ports, appProtocol and backend-mode annotation (the pools they back are made again).
EXACT_HOSTS = st.sampled_from(["a.example.com", "b.example.com", "c.test", "x.a.example.com"])
exact_routes = routes.map(lambda d: {**d, "spec": {**d["spec"], "hostnames": [
    h for h in d["spec"].get("hostnames", []) if not h.startswith("*")]}})
patched_world = st.lists(st.one_of(exact_routes, services), max_size=14)
moded = services.map(lambda d: {**d, "metadata": {**d["metadata"], "annotations": {
    "podway.io/backend-mode": "clusterip"}}})
slices = st.fixed_dictionaries({
    "apiVersion": st.just("discovery.k8s.io/v1"), "kind": st.just("EndpointSlice"),
    "metadata": st.fixed_dictionaries({"name": st.sampled_from(["e0", "e1"]),
                                       "namespace": NAMESPACES,
                                       "labels": st.fixed_dictionaries({
                                           "kubernetes.io/service-name": SERVICES})}),
    "addressType": st.just("IPv4"), "ports": st.just([{"port": 8080}]),
    "endpoints": st.lists(st.fixed_dictionaries({
        "addresses": st.sampled_from([["198.18.0.10"], ["198.18.0.11"]]),
        "conditions": st.fixed_dictionaries({"ready": st.booleans()})}), max_size=2)})
route_steps = st.lists(st.one_of(exact_routes.map(lambda d: ("put", d)), _delete, _touch,
                                 services.map(lambda d: ("put", d)),
                                 moded.map(lambda d: ("put", d)),
                                 slices.map(lambda d: ("put", d)),
                                 # a Service or route with a slice, in one update
                                 st.tuples(st.one_of(services, exact_routes), slices).map(
                                     lambda pair: ("pair", pair))),
                       min_size=1, max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patched_world, st.sampled_from([0, 1, 2]), route_steps, st.sampled_from([256, 1]))
def test_patched_route_changes_equal_from_scratch(start: list[Any], listeners: int,
                                                  sequence: list[Any], scoped_min: int) -> None:
    """Route, Service and EndpointSlice changes (the patched path) give what translating
    from scratch gives; also with an exact-hostname listener served as scopes (a threshold of
    one host: the edited table hands the scoped builder its virtual hosts)."""
    gw = [_listener("http", 80, None, "All"), _listener("a", 80, "a.example.com", "All"),
          _listener("alt", 8080, None, "Same")][:listeners + 1]
    docs = [OUR_CLASS, {"apiVersion": f"{GROUP}/v1", "kind": "Gateway",
                        "metadata": {"name": "gw", "namespace": "default"},
                        "spec": {"gatewayClassName": "podway", "listeners": gw}}, *start]
    snapshot = Snapshot.of_objects(o for o in map(_parsed, docs) if o is not None)
    run = _Run(snapshot, scoped_min)
    for step in sequence:
        every = sorted((o.KIND, o.key) for o in snapshot.all()
                       if o.KIND in ("HTTPRoute", "GRPCRoute", "Service", "EndpointSlice"))
        if step[0] not in ("put", "pair") and not every:
            continue
        changes: list[tuple[str, Any]] = []
        if step[0] == "pair":
            for doc in step[1]:
                snapshot, changed = _apply(snapshot, ("put", doc))
                changes.extend([changed] if changed is not None else [])
        elif step[0] != "put":  # delete or touch one of those kinds, never another
            kind, key = every[step[1] % len(every)]
            current = snapshot.objects[kind][key]
            snapshot = snapshot.replace(kind, {key: None if step[0] == "delete"
                                               else current.model_copy()})
            changes.append((kind, key))
        else:
            snapshot, changed = _apply(snapshot, step)
            changes.extend([changed] if changed is not None else [])
        built, got = run.step(snapshot, changes)
        event(f"served as scopes: {bool(built[types.SCOPE])}, "
              f"patched: {got.change is not None}")


@pytest.mark.parametrize("real_ip", [False, True])
def test_a_route_change_is_patched_not_rerun(monkeypatch: pytest.MonkeyPatch,
                                             real_ip: bool) -> None:
    """Adding, changing and deleting HTTPRoutes on exact hostnames patches the last structure:
    the whole structure phase does not run again, and the result equals a fresh translation
    (pools come and go with their routes, the Gateway counts its attached routes; the
    listener keeps its X-Real-IP setting, ``--x-real-ip``)."""
    opts = replace(OPTS, real_ip_header=real_ip)
    docs = one_listener_world(0)
    for i in range(6):
        docs.append({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": f"s{i}", "namespace": "default"},
                     "spec": {"ports": [{"port": 80}]}})
    docs.append({"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": "a0", "namespace": "default"},
                 "spec": {"ports": [{"port": 80}]}})
    docs.extend(_route(i) for i in range(4))
    early = _route(0, name="early", host="early.example.com")  # its pool sorts first
    early["spec"]["rules"][0]["backendRefs"][0]["name"] = "a0"
    snapshot = Snapshot.of_objects(o for o in map(_parsed, docs) if o is not None)
    inc = IncrementalTranslator(opts)
    inc.update(snapshot)
    whole_run = _no_whole_run
    for doc in (_route(4, name="extra", host="extra.example.com"),  # a new pool
                _route(5, name="r1", host="r1.example.com"),  # r1 moves to another Service
                early,  # a new pool named before every other
                _twin()):  # a second route on one host
        new = _parsed(doc)
        assert new is not None
        snapshot = snapshot.replace(new.KIND, {new.key: new})
        with monkeypatch.context() as patched:
            patched.setattr(translator, "translate_structure", whole_run)
            got = inc.update(snapshot, [(new.KIND, new.key)])
        want = translate(snapshot, opts)
        assert got.ir == want.ir
        assert list(got.ir.pools) == list(want.ir.pools)
        assert report_yaml(got) == report_yaml(want)
        assert dict(got.statuses) == dict(want.statuses)
    for name in ("r2", "extra"):  # deleted: the last user of s4 goes with "extra"
        snapshot = snapshot.replace("HTTPRoute", {("default", name): None})
        with monkeypatch.context() as patched:
            patched.setattr(translator, "translate_structure", whole_run)
            got = inc.update(snapshot, [("HTTPRoute", ("default", name))])
        want = translate(snapshot, opts)
        assert got.ir == want.ir
        assert report_yaml(got) == report_yaml(want)
    assert "pool/default/s4/80" not in got.ir.pools
    assert all(item.real_ip is real_ip for item in got.ir.listeners)


def _twin() -> dict[str, Any]:
    """Another route on ``r0.example.com`` (its own path: an equal match would be shadowed)."""
    doc = _route(3, name="twin", host="r0.example.com")
    doc["spec"]["rules"][0]["matches"] = [{"path": {"type": "PathPrefix", "value": "/twin"}}]
    return doc


def test_a_hostname_named_by_a_route_without_rules_keeps_its_virtual_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A route with no rules still names its hostname (the virtual host stays, serving the
    catch-all routes): deleting the other route on that hostname, patched, keeps it too."""
    docs: list[dict[str, Any]] = [OUR_CLASS, {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default"},
        "spec": {"gatewayClassName": "podway",
                 "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s0", "namespace": "default"},
         "spec": {"ports": [{"port": 80}]}},
        _route(0, name="every", host="*"), _route(0, name="real", host="h.example.com"),
        {**_route(0, name="empty", host="h.example.com"), "spec": {
            "parentRefs": [{"name": "gw"}], "hostnames": ["h.example.com"], "rules": []}}]
    docs[3]["spec"].pop("hostnames")  # "every" serves any hostname
    snapshot = Snapshot.of_objects(o for o in map(_parsed, docs) if o is not None)
    inc = IncrementalTranslator(OPTS)
    inc.update(snapshot)
    snapshot = snapshot.replace("HTTPRoute", {("default", "real"): None})
    with monkeypatch.context() as patched:
        patched.setattr(translator, "translate_structure", _no_whole_run)
        got = inc.update(snapshot, [("HTTPRoute", ("default", "real"))])
    want = translate(snapshot, OPTS)
    assert "h.example.com" in {v.hostname for ls in want.ir.listeners for v in ls.virtual_hosts}
    assert got.ir == want.ir


def _no_whole_run(*_: object) -> None:
    raise AssertionError("the structure phase ran whole")


def _held(inc: IncrementalTranslator) -> dict[str, int]:
    """How many entries the translator's memo maps hold (what a patch must also forget)."""
    memo = inc._memo
    live = memo.gateway.live
    assert live is not None
    return {"modes": len(memo.modes), "traffic": len(memo.traffic),
            "warnings": len(memo.warnings), "resolved": len(memo.gateway.resolved),
            "by_service": len(live.by_service), "pools_by_service": len(inc._pools_by_service),
            "replays": len(memo.gateway.replays), "vhosts": len(memo.gateway.vhosts)}


def test_patched_route_and_service_churn_leaves_the_memo_as_it_found_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new Service and a route to it, then both deleted, a hundred times over (patched):
    the memo holds what it held before (the Services' modes and traffic settings, the
    routes' resolutions, the Service indexes), not one more entry per change."""
    docs = one_listener_world(3)
    snapshot = Snapshot.of_objects(o for o in map(_parsed, docs) if o is not None)
    inc = IncrementalTranslator(OPTS)
    inc.update(snapshot)
    before = _held(inc)
    monkeypatch.setattr(translator, "translate_structure", _no_whole_run)
    for i in range(10, 110):
        service = _parsed({"apiVersion": "v1", "kind": "Service",
                           "metadata": {"name": f"s{i}", "namespace": "default"},
                           "spec": {"ports": [{"port": 80}]}})
        route = _parsed(_route(i))
        assert service is not None
        assert route is not None
        snapshot = snapshot.replace("Service", {service.key: service})
        snapshot = snapshot.replace("HTTPRoute", {route.key: route})
        got = inc.update(snapshot, [("Service", service.key), ("HTTPRoute", route.key)])
        assert f"pool/default/s{i}/80" in got.ir.pools
        snapshot = snapshot.replace("HTTPRoute", {route.key: None})
        snapshot = snapshot.replace("Service", {service.key: None})
        got = inc.update(snapshot, [("HTTPRoute", route.key), ("Service", service.key)])
    assert _held(inc) == before
    monkeypatch.undo()
    assert got.ir == translate(snapshot, OPTS).ir
