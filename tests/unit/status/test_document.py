"""The status document: ``accepted`` as the API means it, engine refusals on their objects."""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from podway.envoy import types
from podway.envoy.config.scoped import TABLES, bucket, table_name
from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.model.loader import load_text
from podway.pipeline import Rejection
from podway.status import NOT_OWNED, StatusDocument, build, origins_of
from podway.status.file import StatusFile
from podway.translate import Problem, Result, Severity, TranslateOptions, translate
from podway.translate.core.status import ObjectStatus, to_api

GOLDEN = Path(__file__).parents[2] / "golden/translate"
OPTS = TranslateOptions(address="198.18.0.10")

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: lb, namespace: shop}
spec: {type: LoadBalancer, ports: [{port: 8080, targetPort: 80}]}
"""
INGRESS = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: shop}
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /a, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /b, pathType: Prefix, backend: {service: {name: %s, port: {number: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{port: 80}]}
"""


def document(text: str, rejections: tuple[Rejection, ...] = (),
             opts: TranslateOptions = OPTS) -> StatusDocument:
    snapshot = Snapshot.of_objects(load_text(text).objects)
    return build(snapshot=snapshot, result=translate(snapshot, opts), rejections=rejections)


def refusal(type_url: str, resource: str) -> Rejection:
    return Rejection(node="edge-1", type_url=type_url, resource=resource, version="v3",
                     message=f"Error adding/updating listener(s) {resource}: cannot bind")


def test_refused_listener_makes_its_service_not_accepted() -> None:
    """An engine refusing a Service's listener lands on that Service: accepted false."""
    refused = refusal(types.LISTENER, "service/shop/lb/8080/tcp")
    doc = document(SERVICE, (refused,))
    entry = doc.objects[ObjectRef("Service", "shop", "lb")]
    assert entry.accepted is False
    assert entry.rejections == (refused,)
    data = doc.to_data()
    assert data["objects"]["Service/shop/lb"]["engine_rejections"][0]["resource"] == (
        "service/shop/lb/8080/tcp")
    assert data["engine_rejections"][0]["objects"] == ["Service/shop/lb"]
    assert document(SERVICE).objects[ObjectRef("Service", "shop", "lb")].accepted is True


def test_refused_gateway_listener_turns_programmed_false_in_file_and_api() -> None:
    """A Gateway whose listener an engine refuses: Programmed=False, still Accepted (as the API)."""
    text = (GOLDEN / "gateway-basic-http.in.yaml").read_text()
    refused = refusal(types.LISTENER, "gateway/infra/web/80")
    # The case names its Gateway's address, which only --manifest-addresses binds.
    opts = replace(OPTS, manifest_addresses=True)
    doc = document(text, (refused,), opts)
    ref = ObjectRef("Gateway", "infra", "web")
    status = doc.statuses[ref]
    api = to_api(status, kind="Gateway")
    conditions = {c["type"]: (c["status"], c["reason"]) for c in api["conditions"]}
    assert conditions["Programmed"] == ("False", "Invalid")
    assert conditions["Accepted"] == ("True", "Accepted")
    listener = {c["type"]: c["status"] for c in api["listeners"][0]["conditions"]}
    assert listener["Programmed"] == "False"
    assert doc.objects[ref].accepted is True  # the file says what the API says
    assert doc.to_data()["objects"][str(ref)]["status"] == api
    clean = document(text, (), opts).statuses[ref]
    assert {c.type: c.status for c in clean.conditions}["Programmed"] is True


def test_route_with_one_bad_backend_is_accepted_in_file_as_in_api() -> None:
    """HTTPRoute: Accepted=True + ResolvedRefs=False in the API, accepted: true in the file."""
    doc = document((GOLDEN / "gateway-backends.in.yaml").read_text())
    entry = doc.objects[ObjectRef("HTTPRoute", "app", "cross")]
    assert entry.status is not None
    parent = {c.type: c.status for c in entry.status.parents[0].conditions}
    assert (parent["Accepted"], parent["ResolvedRefs"]) == (True, False)
    assert entry.accepted is True
    assert any(p.severity is Severity.ERROR for p in entry.problems)


def test_ingress_is_accepted_while_any_of_it_is_served() -> None:
    """Like an HTTPRoute: a missing backend leaves the Ingress accepted (its paths serve or answer
    503, with problems); an Ingress none of which is served is not accepted."""
    partly = document(INGRESS % "gone").objects[ObjectRef("Ingress", "shop", "shop")]
    assert partly.accepted is True
    assert partly.problems
    nothing = document(INGRESS.replace("path: /a", "path: a").replace("path: /b", "path: b")
                       % "web")
    entry = nothing.objects[ObjectRef("Ingress", "shop", "shop")]
    assert entry.problems
    assert entry.accepted is False


def test_objects_podway_does_not_take_are_not_owned_not_errors() -> None:
    """A NotOwned problem: owned false with the reason, not accepted, listed apart."""
    ref = ObjectRef("Ingress", "shop", "theirs")
    severity = getattr(Severity, "INFO", Severity.WARNING)
    result = Result(ir=translate(Snapshot(), OPTS).ir, problems=(Problem(
        ref=ref, reason=NOT_OWNED, message="class nginx is not Podway's", severity=severity),))
    doc = build(snapshot=Snapshot(), result=result)
    assert [(e.ref, e.owned, e.accepted) for e in doc.not_owned] == [(ref, False, False)]
    assert doc.to_data()["objects"][str(ref)]["reason"] == "class nginx is not Podway's"


def test_document_without_api_status_has_none() -> None:
    """Kinds without a Gateway API status carry no ``status`` (nothing to write to the API)."""
    doc = document(SERVICE)
    assert doc.statuses == {}
    assert "status" not in doc.to_data()["objects"]["Service/shop/lb"]
    assert isinstance(next(iter(doc.objects.values())).status, ObjectStatus | None)


@pytest.mark.parametrize("where", ["missing-dir", "a-directory", "read-only"])
def test_unwritable_status_file_is_logged_once_and_reported(
        where: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Missing folder, a directory in the way, a read-only place: logged once and returned."""
    path = {"missing-dir": tmp_path / "nowhere" / "status.yaml",
            "a-directory": tmp_path,
            "read-only": Path("/proc/self/podway-status.yaml")}[where]
    writer = StatusFile(path)
    doc = document(SERVICE)
    with caplog.at_level(logging.INFO, logger="podway.status.file"):
        first = writer.write(doc)
        second = writer.write(doc)
    assert first is not None
    assert str(path) in first
    assert first == second
    assert [r.levelno for r in caplog.records] == [logging.ERROR]


def test_status_file_recovers_when_writable_again(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Once the folder exists the next state is written, and the recovery is logged."""
    path = tmp_path / "later" / "status.yaml"
    writer = StatusFile(path)
    with caplog.at_level(logging.INFO, logger="podway.status.file"):
        assert writer.write(document(SERVICE)) is not None
        path.parent.mkdir()
        assert writer.write(document(SERVICE)) is None
    assert "Service/shop/lb" in path.read_text()
    assert "written again" in caplog.records[-1].getMessage()


def test_refused_scope_or_shared_table_lands_on_those_hosts_routes() -> None:
    """A scoped listener's scope (``<listener>/host/<host>``) refused: the objects of that
    host's routes; its shared table (``<listener>/hosts/<bucket>``): those of the routes of
    the hosts in that table; not every object on the listener."""
    snapshot = Snapshot.of_objects(load_text(INGRESS % "web").objects)
    ir = translate(snapshot, OPTS).ir
    (listener,) = [ls for ls in ir.listeners if ls.virtual_hosts]
    shop = (ObjectRef("Ingress", "shop", "shop"),)
    assert origins_of(ir, types.SCOPE, f"{listener.name}/host/shop.test") == shop
    assert origins_of(ir, types.SCOPE, f"{listener.name}/host/other.test") == ()
    table = table_name(listener.name, "shop.test")
    assert origins_of(ir, types.ROUTE, table) == shop
    other = f"{listener.name}/hosts/{(bucket('shop.test') + 1) % TABLES}"
    assert origins_of(ir, types.ROUTE, other) == ()
    assert origins_of(ir, types.SCOPE, table) == ()  # (a table's name is no scope's)


def test_status_file_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    """Mode 0600 under a permissive umask, also replacing a world-readable file, and a link
    planted at the temporary name is replaced, not written through."""
    path = tmp_path / "status.yaml"
    path.write_text("old")
    path.chmod(0o644)
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    (tmp_path / ".status.yaml.tmp").symlink_to(target)
    old = os.umask(0)
    try:
        assert StatusFile(path).write(document(SERVICE)) is None
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "Service/shop/lb" in path.read_text()
    assert target.read_text() == "untouched"
