"""The emulator's store is copy-on-write: no stored version is changed in place, and what a
client sent shares no part with what is stored (``jsondata.clone`` does the copies; a write
answers with the stored object, and its watch event carries it, both only serialised)."""

from __future__ import annotations

import copy
from typing import Any

from podway.kube.emulator.jsondata import clone
from podway.kube.emulator.store import Store


def test_clone_is_a_deep_copy_of_json_data_and_of_anything_else_inside() -> None:
    class Opaque:
        def __init__(self) -> None:
            self.items = [1]

    data: dict[str, Any] = {"a": [{"b": "c", "n": 1, "f": 1.5, "t": True, "z": None}],
                            "d": {"e": []}, "o": Opaque()}
    copied = clone(data)
    assert copied["a"] == data["a"]
    assert copied["d"] == data["d"]
    for path in (("a",), ("a", 0), ("d",), ("d", "e"), ("o",)):
        original, made = data, copied
        for step in path:
            original, made = original[step], made[step]
        assert made is not original, path
    assert copied["o"].items == [1]
    assert copied["o"].items is not data["o"].items  # non-JSON values: copy.deepcopy


def _route(store: Store) -> Any:
    return store.resolve("", "v1", "services")


def test_status_writes_share_nothing_with_the_body_and_change_no_version() -> None:
    store = Store()
    rtype = _route(store)
    body = {"metadata": {"name": "web", "labels": {"a": "1"}}, "spec": {"ports": [{"port": 80}]}}
    store.create(rtype, "default", body)
    body["spec"]["ports"][0]["port"] = 1  # the client's body is not what is stored
    assert store.get(rtype, "default", "web")["spec"]["ports"] == [{"port": 80}]

    status = {"loadBalancer": {"ingress": [{"ip": "198.18.0.1"}]}}
    added = copy.deepcopy(store.history[-1].obj)
    written = store.replace(rtype, "default", "web", {"status": status}, subresource="status")
    stored = store.get(rtype, "default", "web")
    assert stored["status"] == status
    assert stored["spec"] == {"ports": [{"port": 80}]}  # a status write keeps the spec
    before = copy.deepcopy(stored)
    status["loadBalancer"]["ingress"][0]["ip"] = "198.18.0.2"
    assert written is stored
    assert store.history[-1].obj is stored  # the event carries the version it made
    assert store.get(rtype, "default", "web") == before
    # the previous version (the one the ADDED event carried) is untouched by the status write
    assert store.history[-2].obj == added
    assert "status" not in store.history[-2].obj


def test_a_whole_object_write_copies_the_body() -> None:
    store = Store()
    rtype = _route(store)
    store.create(rtype, "default", {"metadata": {"name": "web"}, "spec": {"ports": []}})
    body = {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    store.replace(rtype, "default", "web", body)
    body["spec"]["ports"].append({"port": 81})
    assert store.get(rtype, "default", "web")["spec"]["ports"] == [{"port": 80}]


def test_a_status_write_copies_only_the_status_and_changes_no_version_in_place() -> None:
    """The new version shares the spec it left with the old one, and neither changes after."""
    store = Store()
    rtype = _route(store)
    store.create(rtype, "default", {"metadata": {"name": "web", "labels": {"a": "1"}},
                                    "spec": {"ports": [{"port": 80}]}})
    old = store.get(rtype, "default", "web")
    before = copy.deepcopy(old)
    status = {"loadBalancer": {"ingress": [{"ip": "198.18.0.1"}]}}
    new = store.replace(rtype, "default", "web", {"status": status}, subresource="status")
    assert new["spec"] is old["spec"]  # not copied: neither version changes in place
    assert new["metadata"] is not old["metadata"]
    assert new["status"] == status
    assert new["status"] is not status
    assert old == before
    assert new["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"]
