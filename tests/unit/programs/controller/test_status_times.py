"""Status stamping: lastTransitionTime kept while a condition's status holds; other
controllers' route parents are left alone; empty and missing compare equal."""

from __future__ import annotations

from typing import Any

from podway.programs.controller.status_times import same, with_times

OURS = "podway.io/gateway-controller"


def cond(type_: str, status: str, reason: str = "R", when: str | None = None) -> dict[str, Any]:
    out = {"type": type_, "status": status, "reason": reason, "message": "",
           "observedGeneration": 1}
    if when:
        out["lastTransitionTime"] = when
    return out


def parent(name: str, controller: str, *conditions: dict[str, Any]) -> dict[str, Any]:
    return {"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                          "namespace": "default", "name": name},
            "controllerName": controller, "conditions": list(conditions)}


def test_transition_time_kept_unless_the_status_flips() -> None:
    """Same status (even with a new reason) keeps the time; a flip or a new type gets now."""
    before = {"conditions": [cond("Accepted", "True", when="T0"),
                             cond("Programmed", "True", when="T0")]}
    want = {"conditions": [cond("Accepted", "True", reason="Other"),
                           cond("Programmed", "False"), cond("ResolvedRefs", "True")]}
    out = with_times("Gateway", want, before, "T1", OURS)
    assert [c["lastTransitionTime"] for c in out["conditions"]] == ["T0", "T1", "T1"]


def test_route_parents_of_other_controllers_are_kept() -> None:
    """Our parents are stamped and replaced; another controller's entry stays untouched."""
    theirs = parent("other-gw", "example.com/other", cond("Accepted", "True", when="T-1"))
    before = {"parents": [theirs, parent("edge", OURS, cond("Accepted", "True", when="T0"))]}
    want = {"parents": [parent("edge", OURS, cond("Accepted", "True"))]}
    out = with_times("HTTPRoute", want, before, "T1", OURS)
    assert out["parents"][0] == theirs
    assert out["parents"][1]["conditions"][0]["lastTransitionTime"] == "T0"
    assert same(out, {**out, "addresses": []})
    assert not same(out, want)


def test_a_hand_written_status_of_any_shape_is_replaced_not_fatal() -> None:
    """Garbage in the API's status (not lists of mappings) is treated as no status."""
    want = {"conditions": [cond("Accepted", "True")],
            "parents": [parent("edge", OURS, cond("Accepted", "True"))]}
    for before in ({"conditions": "yes", "parents": [1, 2]}, {"conditions": [None]},
                   {"listeners": {"a": 1}, "parents": {"x": 1}}):
        out = with_times("HTTPRoute", want, before, "T1", OURS)
        assert out["conditions"][0]["lastTransitionTime"] == "T1"
        assert out["parents"][0]["conditions"][0]["lastTransitionTime"] == "T1"
