"""The Kubernetes source against the API emulator: real kubernetes-asyncio list/watch paths."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

import podway.sources.kube as kube_module
from podway.base.backoff import Backoff
from podway.kube.emulator import GATEWAY_KINDS, KubeEmulator
from podway.kube.informer import Informer
from podway.model.base import K8sObject
from podway.sources.base import SourceUpdate
from podway.sources.kube import KubeSource, KubeSourceSettings
from tests import builders
from tests.waiting import eventually

GW = "gateway.networking.k8s.io"
FAST = KubeSourceSettings(debounce_s=0.02, max_wait_s=0.2,
                          backoff=Backoff(base=0.01, cap=0.2, jitter=0))
PEM = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n").decode()


def meta(name: str, ns: str | None = "shop", **labels: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "labels": labels}
    if ns is not None:
        out["namespace"] = ns
    return out


def service(name: str = "web", ns: str = "shop", port: int = 80) -> dict[str, Any]:
    return builders.service(name, port, None, namespace=ns, port_name=None, protocol=None,
                            labels={}, kind_fields=False)


def pod(name: str = "web-1", ns: str = "shop", **status: Any) -> dict[str, Any]:
    raw = builders.pod(name, "198.18.1.1", namespace=ns, kind_fields=False, annotations={
        "nodeportlocal.antrea.io": "[]", "other.io/big": "x" * 1000})
    raw["status"] |= status
    return raw


def every_kind(emu: KubeEmulator) -> None:
    """One valid object of every kind the source watches."""
    emu.put("namespaces", {"metadata": meta("shop", None)})
    emu.put("services", service())
    emu.put("endpointslices", {"metadata": meta("web-1", "shop") | {
        "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
        "ports": [{"port": 8080}], "endpoints": [{"addresses": ["198.18.1.1"]}]})
    emu.put("pods", pod())
    emu.put("nodes", {"metadata": meta("n1", None), "status": {
        "addresses": [{"type": "InternalIP", "address": "198.18.0.1"}]}})
    emu.put("secrets", {"metadata": meta("tls"), "type": "kubernetes.io/tls",
                        "data": {"tls.crt": PEM, "tls.key": PEM}})
    emu.put("secrets", {"metadata": meta("opaque"), "type": "Opaque", "data": {"k": PEM}})
    emu.put("secrets", {"metadata": meta("token"), "type": "kubernetes.io/service-account-token",
                        "data": {"token": PEM}})
    emu.put("secrets", {"metadata": meta("sh.helm.release.v1.x.v1"),
                        "type": "helm.sh/release.v1", "data": {"release": PEM}})
    emu.put("configmaps", {"metadata": meta("ca"), "data": {"ca.crt": "pem", "other": "x",
                                                             "engineGroup": "edge"}})
    emu.put("ingressclasses", {"metadata": meta("podway", None),
                               "spec": {"controller": "podway.io/ingress-controller"}})
    emu.put("ingresses", {"metadata": meta("shop"), "spec": {"rules": [{"http": {"paths": [{
        "path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    emu.install_gateway_api()
    parent = [{"name": "edge"}]
    backend = [{"name": "web", "port": 80}]
    emu.put("gatewayclasses", {"metadata": meta("podway", None),
                               "spec": {"controllerName": "podway.io/gateway-controller"}})
    emu.put("gateways", {"metadata": meta("edge"), "spec": {
        "gatewayClassName": "podway", "listeners": [{"name": "http", "protocol": "HTTP",
                                                     "port": 80}]}})
    emu.put("listenersets", {"metadata": meta("team"), "spec": {
        "parentRef": {"name": "edge"}, "listeners": [{"name": "http", "protocol": "HTTP",
                                                      "port": 8080}]}})
    emu.put("httproutes", {"metadata": meta("r"), "spec": {
        "parentRefs": parent, "rules": [{"backendRefs": backend}]}})
    emu.put("grpcroutes", {"metadata": meta("g"), "spec": {
        "parentRefs": parent, "rules": [{"backendRefs": backend}]}})
    for plural in ("tlsroutes", "tcproutes", "udproutes"):
        emu.put(plural, {"metadata": meta("l4"), "spec": {
            "parentRefs": parent, "rules": [{"backendRefs": backend}]}})
    emu.put("referencegrants", {"metadata": meta("rg"), "spec": {
        "from": [{"group": GW, "kind": "HTTPRoute", "namespace": "other"}],
        "to": [{"group": "", "kind": "Service"}]}})
    emu.put("backendtlspolicies", {"metadata": meta("btls"), "spec": {
        "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
        "validation": {"hostname": "web.shop", "caCertificateRefs": [
            {"group": "", "kind": "ConfigMap", "name": "ca"}]}}})
    emu.put("backendlbpolicies", {"metadata": meta("blb"), "spec": {
        "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
        "sessionPersistence": {"sessionName": "s"}}})


@asynccontextmanager
async def running(emu: KubeEmulator, settings: KubeSourceSettings = FAST
                  ) -> AsyncIterator[tuple[KubeSource, Callable[[], Any]]]:
    """A started source and ``next_update()`` (10 s cap each)."""
    async with client.ApiClient(client.Configuration(host=emu.url)) as api:
        source = KubeSource(api, settings)
        updates = source.watch()

        async def next_update() -> SourceUpdate:
            return await asyncio.wait_for(anext(updates), 10)
        try:
            yield source, next_update
        finally:
            await updates.aclose()


async def until_update(next_update: Callable[[], Any],
                       check: Callable[[SourceUpdate], bool]) -> SourceUpdate:
    """Updates until one satisfies ``check``."""
    while True:
        update: SourceUpdate = await next_update()
        if check(update):
            return update


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        yield emulator


def kinds(update: SourceUpdate) -> set[str]:
    return {kind for kind, objs in update.snapshot.objects.items() if objs}


async def test_every_kind_reaches_the_first_snapshot_trimmed(emu: KubeEmulator) -> None:
    """Each watched kind arrives, typed; Secrets but the types Podway never reads (tokens,
    Helm releases); Pods and ConfigMaps are trimmed."""
    every_kind(emu)
    async with running(emu) as (_, next_update):
        first = await next_update()
    assert first.errors == ()
    assert first.changed is None
    assert kinds(first) == {"Namespace", "Service", "EndpointSlice", "Pod", "Node", "Secret",
                            "ConfigMap", "IngressClass", "Ingress", *GATEWAY_KINDS}
    assert set(first.snapshot.objects["Secret"]) == {("shop", "tls"), ("shop", "opaque")}
    pod_obj = first.snapshot.objects["Pod"][("shop", "web-1")]
    assert dict(pod_obj.metadata.annotations) == {"nodeportlocal.antrea.io": "[]"}
    assert pod_obj.metadata.resource_version == ""
    config_map = first.snapshot.objects["ConfigMap"][("shop", "ca")]
    # The values Podway reads (a CA bundle, GatewayClass parameters) stay; others are emptied,
    # their keys kept (parameters refuse unknown keys in both modes).
    assert dict(config_map.data) == {  # type: ignore[attr-defined]
        "ca.crt": "pem", "other": "", "engineGroup": "edge"}


async def test_changed_keys_are_exact_and_irrelevant_changes_are_silent(
        emu: KubeEmulator) -> None:
    """A Service edit reports that one key; a Pod change Podway does not read reports nothing,
    and the unchanged objects keep their identity."""
    emu.put("services", service())
    emu.put("pods", pod())
    async with running(emu) as (_, next_update):
        first = await next_update()
        emu.put("pods", pod(conditions=[{"type": "Ready", "status": "False"}]))  # not read
        emu.put("services", service(port=81))
        update = await next_update()
    assert update.changed == (("Service", ("shop", "web")),)
    pod_key = ("shop", "web-1")
    assert update.snapshot.objects["Pod"][pod_key] is first.snapshot.objects["Pod"][pod_key]


async def test_broken_and_compacted_watches_lose_nothing(emu: KubeEmulator) -> None:
    """Changes while a watch is down, and a deletion hidden behind a 410, all arrive."""
    emu.put("services", service("a"))
    emu.put("services", service("b"))
    async with running(emu) as (source, next_update):
        await next_update()
        emu.break_watches()
        emu.put("services", service("c"))
        await until_update(next_update,
                           lambda u: ("shop", "c") in u.snapshot.objects["Service"])
        emu.delete("services", "shop", "a", notify=False)  # no watch hears of it
        emu.put("services", service("b", port=8080))
        emu.compact()
        last = await until_update(
            next_update, lambda u: ("shop", "a") not in u.snapshot.objects["Service"]
            and u.snapshot.objects["Service"][("shop", "b")].spec.ports[0].port == 8080)
        assert source.relists >= 1
    assert set(last.snapshot.objects["Service"]) == {("shop", "b"), ("shop", "c")}


async def test_gateway_crd_installed_later_is_picked_up_and_removal_drops(
        emu: KubeEmulator, caplog: pytest.LogCaptureFixture) -> None:
    """Without the HTTPRoute CRD the source starts (logged once); installing it later brings
    its objects in; deleting it takes them out."""
    caplog.set_level("INFO", logger="podway.sources.kube")
    emu.put("services", service())
    async with running(emu) as (_, next_update):
        first = await next_update()
        assert "HTTPRoute" not in kinds(first)
        assert sum("HTTPRoute is not installed" in r.message for r in caplog.records) == 1
        emu.install_crd("HTTPRoute")
        emu.put("httproutes", {"metadata": meta("r"), "spec": {"parentRefs": [{"name": "g"}]}})
        update = await until_update(next_update, lambda u: "HTTPRoute" in kinds(u))
        assert ("HTTPRoute", ("shop", "r")) in (update.changed or ())
        emu.uninstall_crd("HTTPRoute")
        await until_update(next_update, lambda u: "HTTPRoute" not in kinds(u))


async def test_gateway_api_bundle_versions_reach_the_snapshot_and_touch_the_classes(
        emu: KubeEmulator) -> None:
    """The Gateway API CRDs' bundle-version annotations are in the snapshot (for the
    GatewayClass SupportedVersion condition); an annotation changed on the CRD alone (no object
    changed) is handed on with every GatewayClass as changed, as a new object."""
    from podway.kube.emulator.resources import gateway_api_crd
    from podway.translate.gateway.status import GATEWAY_API_VERSION

    emu.install_gateway_api()
    emu.put("gatewayclasses", {"metadata": meta("podway", None),
                               "spec": {"controllerName": "podway.io/gateway-controller"}})
    async with running(emu) as (_, next_update):
        first = await next_update()
        bundles = first.snapshot.gateway_api_bundles
        assert bundles is not None
        assert bundles["gateways.gateway.networking.k8s.io"] == GATEWAY_API_VERSION
        before = first.snapshot.objects["GatewayClass"][("", "podway")]
        crd = gateway_api_crd("Gateway")
        crd["metadata"]["annotations"] = {"gateway.networking.k8s.io/bundle-version": "v1.2.0"}
        emu.put("customresourcedefinitions", crd)
        update = await until_update(next_update, lambda u: (
            u.snapshot.gateway_api_bundles or {}).get(
                "gateways.gateway.networking.k8s.io") == "v1.2.0")
        assert ("GatewayClass", ("", "podway")) in (update.changed or ())
        assert update.snapshot.objects["GatewayClass"][("", "podway")] is not before


async def test_bad_object_is_an_error_and_others_are_unaffected(emu: KubeEmulator) -> None:
    """A Service the model rejects is left out with a LoadError naming it; fixing it clears
    the error; the good Service is served throughout."""
    emu.put("services", service("good"))
    emu.put("services", service("bad", port=70000))
    async with running(emu) as (_, next_update):
        first = await next_update()
        assert set(first.snapshot.objects["Service"]) == {("shop", "good")}
        assert len(first.errors) == 1
        assert first.errors[0].object == "Service/shop/bad"
        assert first.errors[0].field.startswith("spec.ports[0].port")
        emu.put("services", service("bad", port=8080))
        fixed = await next_update()
    assert fixed.errors == ()
    assert set(fixed.snapshot.objects["Service"]) == {("shop", "good"), ("shop", "bad")}
    assert fixed.changed == (("Service", ("shop", "bad")),)


async def test_burst_is_at_most_two_updates(emu: KubeEmulator) -> None:
    """Twenty changes made together after a quiet spell: the first goes out at once (leading
    edge, with whatever arrived with it), the rest as one more update; all twenty named."""
    settings = KubeSourceSettings(debounce_s=0.3, max_wait_s=5.0)
    async with running(emu, settings) as (_, next_update):
        await next_update()
        for i in range(20):
            emu.put("services", service(f"s{i}"))
        update = await next_update()
        changed = set(update.changed or ())
        if len(changed) < 20:
            changed |= set((await next_update()).changed or ())
    assert len(changed) == 20


async def test_lone_change_after_quiet_does_not_wait_for_the_debounce(
        emu: KubeEmulator) -> None:
    """After a quiet spell (no update for a debounce), one change arrives before the debounce
    could have ended (leading edge) instead of after it."""
    settings = KubeSourceSettings(debounce_s=2.0, max_wait_s=60.0)
    async with running(emu, settings) as (_, next_update):
        await next_update()
        await asyncio.sleep(settings.debounce_s)  # the quiet spell
        loop = asyncio.get_running_loop()
        began = loop.time()
        emu.put("services", service("lone"))
        update = await next_update()
        assert update.changed == (("Service", ("shop", "lone")),)
        assert loop.time() - began < settings.debounce_s


async def test_lone_change_soon_after_an_update_waits_only_the_rest_of_the_debounce(
        emu: KubeEmulator) -> None:
    """A lone change that arrives within the debounce of the last update goes out once the
    debounce since that update has passed (at most one leading edge per debounce), not a whole
    debounce after it arrived."""
    settings = KubeSourceSettings(debounce_s=2.0, max_wait_s=60.0)
    async with running(emu, settings) as (_, next_update):
        await next_update()
        await asyncio.sleep(settings.debounce_s)  # the quiet spell
        loop = asyncio.get_running_loop()
        emu.put("services", service("first"))
        assert (await next_update()).changed == (("Service", ("shop", "first")),)
        first_out = loop.time()
        waiting = asyncio.ensure_future(next_update())
        await asyncio.sleep(settings.debounce_s / 2)
        began = loop.time()
        emu.put("services", service("lone"))
        update = await waiting
        assert update.changed == (("Service", ("shop", "lone")),)
        assert loop.time() - first_out >= settings.debounce_s  # still one per debounce
        assert loop.time() - began < settings.debounce_s * 0.8  # not a debounce after it


async def test_a_burst_of_no_ops_does_not_end_the_quiet_spell(emu: KubeEmulator) -> None:
    """A write that changes nothing Podway reads (a Pod annotation; the controller's own status
    writes) makes no update, so it does not count as activity: a change just after it still
    goes out at once instead of waiting for the debounce."""
    settings = KubeSourceSettings(debounce_s=2.0, max_wait_s=60.0)
    emu.put("pods", pod())
    async with running(emu, settings) as (_, next_update):
        await next_update()
        # A consumer waiting all along, as the pipeline is: the no-op burst runs on its own.
        waiting = asyncio.ensure_future(next_update())
        await asyncio.sleep(settings.debounce_s)  # the quiet spell
        flapped = pod()
        flapped["metadata"]["annotations"]["other.io/big"] = "y"  # nothing Podway reads
        emu.put("pods", flapped)
        await asyncio.sleep(0.3)  # its burst is over
        loop = asyncio.get_running_loop()
        began = loop.time()
        emu.put("services", service("lone"))
        update = await waiting
        assert update.changed == (("Service", ("shop", "lone")),)
        assert loop.time() - began < settings.debounce_s


async def test_a_change_during_a_burst_of_no_ops_goes_out_at_once(emu: KubeEmulator) -> None:
    """No-ops arriving soon after an update (the controller's own status writes follow every
    state) do not hold a burst open: a change after the quiet spell goes out at the leading
    edge even while such writes keep coming, not a debounce later."""
    settings = KubeSourceSettings(debounce_s=1.0, max_wait_s=60.0)
    emu.put("pods", pod())
    async with running(emu, settings) as (_, next_update):
        await next_update()
        emu.put("services", service("first"))
        assert (await next_update()).changed == (("Service", ("shop", "first")),)
        waiting = asyncio.ensure_future(next_update())
        loop = asyncio.get_running_loop()
        quiet_from = loop.time()
        flaps = 0
        while loop.time() - quiet_from < settings.debounce_s * 1.2:  # no-ops, 0.2 s apart
            flapped = pod()
            flapped["metadata"]["annotations"]["other.io/flap"] = str(flaps)
            emu.put("pods", flapped)
            flaps += 1
            await asyncio.sleep(0.2)
        began = loop.time()
        emu.put("services", service("lone"))
        update = await waiting
        assert update.changed == (("Service", ("shop", "lone")),)
        assert loop.time() - began < settings.debounce_s / 2


async def test_constant_churn_does_not_starve_updates(emu: KubeEmulator) -> None:
    """Changes every 50 ms with a 1 s debounce: max_wait still lets updates out mid-churn."""
    settings = KubeSourceSettings(debounce_s=1.0, max_wait_s=0.2)
    stop = asyncio.Event()

    async def churn() -> None:
        i = 0
        while not stop.is_set():
            emu.put("services", service("busy", port=1000 + i % 100))
            i += 1
            await asyncio.sleep(0.05)

    async with running(emu, settings) as (_, next_update):
        await next_update()
        task = asyncio.create_task(churn())
        try:
            for _ in range(2):  # two updates while the churn never paused for 1 s
                update = await next_update()
                assert update.changed == (("Service", ("shop", "busy")),)
            assert not task.done()
        finally:
            stop.set()
            await task


async def test_namespace_filter_list_and_selector(emu: KubeEmulator) -> None:
    """Only listed namespaces whose labels match; labelling a namespace later brings its
    objects in, unlabelling takes them out."""
    for ns, labels in (("shop", {"edge": "yes"}), ("blog", {}), ("other", {"edge": "yes"})):
        emu.put("namespaces", {"metadata": meta(ns, None, **labels)})
        emu.put("services", service("web", ns))
    settings = KubeSourceSettings(namespaces=("shop", "blog"), namespace_selector="edge=yes",
                                  debounce_s=0.02, max_wait_s=0.2)
    async with running(emu, settings) as (_, next_update):
        first = await next_update()
        assert set(first.snapshot.objects["Service"]) == {("shop", "web")}
        emu.put("namespaces", {"metadata": meta("blog", None, edge="yes")})
        await until_update(next_update,
                           lambda u: ("blog", "web") in u.snapshot.objects["Service"])
        emu.put("namespaces", {"metadata": meta("shop", None)})
        last = await until_update(
            next_update, lambda u: ("shop", "web") not in u.snapshot.objects["Service"])
    assert set(last.snapshot.objects["Service"]) == {("blog", "web")}


async def test_a_selector_admits_gateway_kinds_listed_before_the_namespaces(
        emu: KubeEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a namespace selector, an HTTPRoute in a matching namespace is in the first update,
    listed once, even when the Namespaces' LIST answers late: the Gateway kinds (started as
    their CRDs are seen) wait for the namespaces' labels, which admit or refuse each object.
    (Started before, they dropped it and listed everything again when its namespace came in,
    and a first update could go out before that second list: without the route.)"""
    emu.install_gateway_api()
    emu.put("namespaces", {"metadata": meta("shop", None, edge="yes")})
    emu.put("services", service("web"))
    emu.put("httproutes", {"metadata": meta("r"), "spec": {
        "parentRefs": [{"name": "edge"}], "rules": [{"backendRefs": [{"name": "web",
                                                                      "port": 80}]}]}})
    relist = Informer._relist

    async def slow_namespaces(self: Informer) -> str:
        if self.name == "Namespace":
            await asyncio.sleep(0.5)
        return await relist(self)

    monkeypatch.setattr(Informer, "_relist", slow_namespaces)
    settings = KubeSourceSettings(namespace_selector="edge=yes", debounce_s=0.02,
                                  max_wait_s=0.2)
    async with running(emu, settings) as (source, next_update):
        first = await next_update()
        assert source.relists == 0
    assert set(first.snapshot.objects["HTTPRoute"]) == {("shop", "r")}
    assert set(first.snapshot.objects["Service"]) == {("shop", "web")}


async def test_every_first_list_runs_at_once_after_the_namespaces(
        emu: KubeEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a selector the built-in kinds are listed while the Gateway kinds' lists are
    still out (the API prepares one while the source parses another); the first update still
    waits for all of them."""
    emu.install_gateway_api()
    emu.put("services", service("web"))
    emu.put("httproutes", {"metadata": meta("r"), "spec": {
        "parentRefs": [{"name": "edge"}], "rules": [{"backendRefs": [{"name": "web",
                                                                      "port": 80}]}]}})
    relist = Informer._relist
    began: dict[str, float] = {}
    ended: dict[str, float] = {}

    async def timed(self: Informer) -> str:
        began.setdefault(self.name, asyncio.get_running_loop().time())
        if self.name == "HTTPRoute":
            await asyncio.sleep(0.3)
        try:
            return await relist(self)
        finally:
            ended.setdefault(self.name, asyncio.get_running_loop().time())

    monkeypatch.setattr(Informer, "_relist", timed)
    async with running(emu) as (_source, next_update):
        first = await next_update()
    assert began["Service"] < ended["HTTPRoute"]
    assert began["EndpointSlice"] < ended["HTTPRoute"]
    assert set(first.snapshot.objects["HTTPRoute"]) == {("shop", "r")}
    assert set(first.snapshot.objects["Service"]) == {("shop", "web")}


TRAFFIC_POLICY_CRD = (Path(__file__).resolve().parents[3] / "deploy" / "helm" / "podway" / "crds"
                      / "trafficpolicies.podway.io.yaml")


async def test_traffic_policy_is_watched_once_its_crd_from_deploy_is_installed(
        emu: KubeEmulator, caplog: pytest.LogCaptureFixture) -> None:
    """Without the CRD the source starts (logged once); the CRD as shipped in deploy/ brings
    TrafficPolicy objects in, typed."""
    caplog.set_level("INFO", logger="podway.sources.kube")
    emu.put("services", service())
    async with running(emu) as (source, next_update):
        first = await next_update()
        assert "TrafficPolicy" not in kinds(first)
        assert source.watched_version("TrafficPolicy") is None
        assert sum("TrafficPolicy is not installed" in r.message for r in caplog.records) == 1
        emu.put("customresourcedefinitions", yaml.safe_load(TRAFFIC_POLICY_CRD.read_text()))
        emu.put("trafficpolicies", {"metadata": meta("tp"), "spec": {
            "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
            "timeouts": {"request": "5s"}}}, group="podway.io")
        update = await until_update(next_update, lambda u: "TrafficPolicy" in kinds(u))
        assert source.watched_version("TrafficPolicy") == "v1alpha1"
    policy = update.snapshot.objects["TrafficPolicy"][("shop", "tp")]
    assert policy.spec.timeouts.request == "5s"  # type: ignore[attr-defined]


async def test_on_raw_sees_every_event_before_parsing_and_may_take_fields(
        emu: KubeEmulator) -> None:
    """The public hook gets (kind, event, raw) for lists, watch events and deletions; what it
    takes out of ``raw`` is not parsed (the controller keeps Service status this way)."""
    emu.put("services", service("a"))
    seen: list[tuple[str, str, str]] = []

    def tap(kind: str, event: str, raw: dict[str, Any]) -> None:
        if kind == "Service":
            seen.append((kind, event, raw["metadata"]["name"]))
            raw.get("spec", {}).pop("ports", None)

    async with client.ApiClient(client.Configuration(host=emu.url)) as api:
        source = KubeSource(api, FAST, on_raw=tap)
        updates = source.watch()
        try:
            first = await asyncio.wait_for(anext(updates), 10)
            emu.put("services", service("b"))
            emu.delete("services", "shop", "a")
            while ("Service", "DELETED", "a") not in seen:
                await asyncio.wait_for(anext(updates), 10)
        finally:
            await updates.aclose()
    assert seen == [("Service", "ADDED", "a"), ("Service", "ADDED", "b"),
                    ("Service", "DELETED", "a")]
    assert first.snapshot.objects["Service"][("shop", "a")].spec.ports == ()


async def test_kept_objects_share_fields_sets_and_no_op_events_are_not_walked(
        emu: KubeEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects of one shape in the snapshot point at one pooled fields set
    (``sources.sharing``); an event that changes nothing Podway reads is dropped at the flush
    without being walked for sharing, and a changed object is walked once."""
    emu.put("services", service("a"))
    emu.put("services", service("b"))
    emu.put("pods", pod())
    async with running(emu) as (source, next_update):
        first = await next_update()
        services = first.snapshot.objects["Service"]
        a, b = services[("shop", "a")], services[("shop", "b")]
        assert a.metadata.__pydantic_fields_set__ is b.metadata.__pydantic_fields_set__
        pool = source._fields_sets
        walked: list[object] = []
        share = pool.share

        def spy(model: Any) -> None:
            walked.append(model)
            share(model)
        monkeypatch.setattr(pool, "share", spy)
        emu.put("pods", pod(conditions=[{"type": "Ready", "status": "False"}]))  # not read
        emu.put("services", service("a", port=81))
        update = await next_update()
    assert update.changed == (("Service", ("shop", "a")),)
    assert [m for m in walked if isinstance(m, K8sObject)] == [
        update.snapshot.objects["Service"][("shop", "a")]]


async def test_a_big_first_list_is_shared_after_the_first_update(
        emu: KubeEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``SHARE_LATER_OVER`` objects the first update goes out before its objects are
    shared (issue 24: 0.3 s of a cold start's 30,000); they are shared once it is taken."""
    monkeypatch.setattr(kube_module, "SHARE_LATER_OVER", 1)
    emu.put("services", service("a"))
    emu.put("services", service("b"))
    async with running(emu) as (_source, next_update):
        first = await next_update()
        services = first.snapshot.objects["Service"]
        a, b = services[("shop", "a")], services[("shop", "b")]
        assert a.metadata.__pydantic_fields_set__ is not b.metadata.__pydantic_fields_set__
        waiting = asyncio.create_task(next_update())  # the source goes on: sharing now
        try:
            await eventually(lambda: a.metadata.__pydantic_fields_set__
                             is b.metadata.__pydantic_fields_set__)
            assert a == services[("shop", "a")]
        finally:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await waiting


async def test_a_cancel_that_meets_a_change_ends_the_burst_wait() -> None:
    """The source is cancelled in the very loop turn a change arrives while it waits out a
    burst: the cancel ends it (``asyncio.wait_for`` on 3.11 returned the change instead and
    the source went on, so whoever stopped it waited for the next update)."""
    async with client.ApiClient(client.Configuration(host="http://127.0.0.1:9")) as api:
        source = KubeSource(api, FAST)
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(source._settle(loop.time() + 10, 1.0))
        await asyncio.sleep(0)  # it is in its wait
        source._changed.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
