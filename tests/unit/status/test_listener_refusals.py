"""Engine refusals of Gateway API listeners land on the object that declared the listener: a
ListenerSet's on the set (its listener and its own ``Programmed``), never on the parent Gateway
unless one of the Gateway's own listeners is on the refused port (GEP-1713)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from podway.engines.member_health import Refusal
from podway.envoy import types
from podway.envoy.engine.listener_failures import describe
from podway.model import Snapshot
from podway.model.base import ObjectRef
from podway.model.loader import load_text
from podway.pipeline import Rejection
from podway.status import StatusDocument, build
from podway.status.incremental import DocumentBuilder
from podway.status.refusals import port_unavailable
from podway.translate import TranslateOptions, translate
from podway.translate.core.status import to_api

CASE = (Path(__file__).parents[2] / "golden/translate/gateway-listenersets.in.yaml").read_text()
OPTS = TranslateOptions(address="198.18.0.10")
GATEWAY = ObjectRef("Gateway", "infra", "shared")
TEAM_A = ObjectRef("ListenerSet", "team-a", "team-a")
# Port 443 of Gateway infra/shared carries only team-a's "https" listener; port 80 carries
# the Gateway's own "http" and team-a's "http" (its "dup" is conflicted, not served).
SET_ONLY = "gateway/infra/shared/443"
SHARED = "gateway/infra/shared/80"
BIND = "Error adding/updating listener(s) {0}: cannot bind '198.18.0.10:{1}': Address already " \
       "in use"


def nack(resource: str, message: str, type_url: str = types.LISTENER) -> Rejection:
    return Rejection(node="edge-1", type_url=type_url, resource=resource, version="7",
                     message=message)


def document(*rejections: Rejection) -> StatusDocument:
    snapshot = Snapshot.of_objects(load_text(CASE).objects)
    return build(snapshot=snapshot, result=translate(snapshot, OPTS), rejections=rejections)


def api(doc: StatusDocument, ref: ObjectRef) -> dict[str, Any]:
    return to_api(doc.statuses[ref], kind=ref.kind)


def conditions(of: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in of["conditions"]}


def listener(status: dict[str, Any], name: str) -> dict[str, tuple[str, str]]:
    return conditions(next(ls for ls in status["listeners"] if ls["name"] == name))


def test_ir_listeners_carry_the_listener_sets_listeners_as_sections() -> None:
    snapshot = Snapshot.of_objects(load_text(CASE).objects)
    ir = translate(snapshot, OPTS).ir
    named = {ls.name: [(str(s.origin), s.name) for s in ls.sections] for ls in ir.listeners}
    assert named[SET_ONLY] == [(str(TEAM_A), "https")]
    assert named[SHARED] == [(str(GATEWAY), "http"), (str(TEAM_A), "http")]
    assert all(ls.origins == (GATEWAY,) for ls in ir.listeners if ls.name in named
               and ls.name.startswith("gateway/infra/shared/"))


def test_a_set_listener_that_cannot_bind_is_reported_on_the_set_not_the_gateway() -> None:
    clean = document()
    refused = nack(SET_ONLY, BIND.format(SET_ONLY, 443))
    doc = document(refused)
    team = api(doc, TEAM_A)
    assert listener(team, "https")["Programmed"] == ("False", "PortUnavailable")
    assert listener(team, "https")["Accepted"] == ("True", "Accepted")  # valid, not propagated
    https = next(ls for ls in team["listeners"] if ls["name"] == "https")
    programmed = next(c for c in https["conditions"] if c["type"] == "Programmed")
    assert "cannot bind" in programmed["message"]
    assert "edge-1" in programmed["message"]
    assert listener(team, "http") == listener(api(clean, TEAM_A), "http")
    assert listener(team, "dup") == listener(api(clean, TEAM_A), "dup")
    # Its "http" listener still serves: the set stays Programmed, the refusal in the message.
    assert conditions(team)["Programmed"] == ("True", "Programmed")
    own = next(c for c in team["conditions"] if c["type"] == "Programmed")
    assert own["message"].startswith("1 of 3 listeners served; engine edge-1 refused")
    assert conditions(team)["Accepted"] == conditions(api(clean, TEAM_A))["Accepted"]
    # The Gateway's own configuration was not refused: its status is untouched, its
    # attachedListenerSets still counts the set.
    assert api(doc, GATEWAY) == api(clean, GATEWAY)
    assert doc.objects[GATEWAY].rejections == ()
    assert doc.objects[TEAM_A].rejections == (refused,)
    data = doc.to_data()
    assert data["engine_rejections"][0]["objects"] == [str(TEAM_A)]
    assert data["objects"][str(TEAM_A)]["status"] == team


def test_a_shared_port_refused_hits_the_gateways_and_the_sets_listener_on_it() -> None:
    clean = document()
    refused = nack(SHARED, f"Error adding/updating listener(s) {SHARED}: invalid filter chain")
    doc = document(refused)
    team, gateway = api(doc, TEAM_A), api(doc, GATEWAY)
    assert listener(team, "http")["Programmed"] == ("False", "Invalid")
    assert listener(team, "https") == listener(api(clean, TEAM_A), "https")
    assert conditions(team)["Programmed"] == ("True", "Programmed")
    assert listener(gateway, "http")["Programmed"] == ("False", "Invalid")
    assert conditions(gateway)["Programmed"] == ("False", "Invalid")
    assert conditions(gateway)["Accepted"] == ("True", "Accepted")
    assert gateway["attachedListenerSets"] == api(clean, GATEWAY)["attachedListenerSets"]
    assert doc.to_data()["engine_rejections"][0]["objects"] == [str(GATEWAY), str(TEAM_A)]


def test_a_set_with_every_served_listener_refused_is_not_programmed() -> None:
    """Both ports of team-a refused (one could not be bound): the set is Programmed=False,
    PortUnavailable as one refusal says so; the Gateway is hit through its own port 80 only."""
    doc = document(nack(SET_ONLY, BIND.format(SET_ONLY, 443)),
                   nack(SHARED, "invalid filter chain"))
    team = api(doc, TEAM_A)
    assert conditions(team)["Programmed"] == ("False", "PortUnavailable")
    assert listener(team, "http")["Programmed"] == ("False", "Invalid")
    assert listener(team, "https")["Programmed"] == ("False", "PortUnavailable")
    assert [r.resource for r in doc.objects[GATEWAY].rejections] == [SHARED]


def test_a_refused_certificate_of_a_set_listener_lands_on_the_set() -> None:
    ir_listener = next(ls for ls in translate(
        Snapshot.of_objects(load_text(CASE).objects), OPTS).ir.listeners if ls.name == SET_ONLY)
    secret = ir_listener.certificates[0].name
    doc = document(nack(secret, "bad certificate", types.SECRET))
    assert listener(api(doc, TEAM_A), "https")["Programmed"] == ("False", "Invalid")
    assert listener(api(doc, TEAM_A), "http")["Programmed"] == ("True", "Programmed")
    assert doc.objects[GATEWAY].rejections == ()


def test_a_bind_failure_after_the_ack_is_port_unavailable_on_the_set() -> None:
    """Envoy accepted the listener and could not listen (no NACK; its log or its counter):
    the engine's report becomes the same rejection, and the set says PortUnavailable."""
    for why in (describe("cannot listen() errno=98"),
                "the engine accepted the listener, then could not create it (Envoy counted "
                "listener_manager.listener_create_failure; …)"):
        failure = Refusal(SET_ONLY, 1, why)
        refused = nack(failure.listener, failure.reason)
        assert port_unavailable(refused)
        team = api(document(refused), TEAM_A)
        assert listener(team, "https")["Programmed"] == ("False", "PortUnavailable")
    assert not port_unavailable(nack(SET_ONLY, "invalid filter chain"))
    assert not port_unavailable(nack("x", "cannot bind", types.CLUSTER))


def test_the_incremental_document_equals_the_whole_one_as_refusals_come_and_go() -> None:
    snapshot = Snapshot.of_objects(load_text(CASE).objects)
    result = translate(snapshot, OPTS)
    builder = DocumentBuilder()
    steps: list[tuple[Rejection, ...]] = [
        (), (nack(SET_ONLY, BIND.format(SET_ONLY, 443)),),
        (nack(SHARED, "invalid filter chain"),), ()]
    for generation, rejections in enumerate(steps, 1):
        got = builder.build(snapshot=snapshot, result=result, rejections=rejections,
                            generation=generation)
        assert got == build(snapshot=snapshot, result=result, rejections=rejections,
                            generation=generation)
