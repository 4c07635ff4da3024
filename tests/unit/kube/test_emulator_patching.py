"""The emulator's patch formats and selectors behave as the API server's do (pure functions)."""

from __future__ import annotations

import pytest

from podway.kube.emulator.patching import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from podway.kube.selectors import SelectorError, field_selector, label_selector


def test_merge_patch_deletes_with_null_and_replaces_lists() -> None:
    """RFC 7386: null removes a key, objects merge, lists are replaced whole."""
    doc = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert merge_patch(doc, {"a": {"b": None, "d": 3}, "l": [9]}) == {"a": {"c": 2, "d": 3},
                                                                      "l": [9]}
    assert doc == {"a": {"b": 1, "c": 2}, "l": [1, 2]}  # input untouched


def test_json_patch_operations_and_failed_test() -> None:
    """RFC 6902 add/replace/remove/move/test; a failed test or missing path is an error."""
    doc = {"metadata": {"labels": {"a": "1"}}, "list": [1, 2]}
    out = json_patch(doc, [{"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
                           {"op": "replace", "path": "/list/0", "value": 7},
                           {"op": "add", "path": "/list/-", "value": 3},
                           {"op": "remove", "path": "/metadata/labels/a"},
                           {"op": "move", "from": "/list", "path": "/moved"},
                           {"op": "test", "path": "/moved/0", "value": 7}])
    assert out == {"metadata": {"labels": {"b/c": "2"}}, "moved": [7, 2, 3]}
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "test", "path": "/list/0", "value": 5}])
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])


def test_strategic_merge_patch_merges_lists_by_key() -> None:
    """Conditions merge by type, containers by name, ``$patch: delete`` removes one element."""
    doc = {"status": {"conditions": [{"type": "Ready", "status": "False"},
                                     {"type": "Synced", "status": "True"}]},
           "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
                    "args": ["1", "2"]}}
    patch = {"status": {"conditions": [{"type": "Ready", "status": "True"}]},
             "spec": {"containers": [{"name": "b", "$patch": "delete"},
                                     {"name": "c", "image": "z"}], "args": ["3"]}}
    out = strategic_merge_patch(doc, patch)
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"},
                                           {"type": "Synced", "status": "True"}]
    assert out["spec"]["containers"] == [{"name": "a", "image": "x"},
                                         {"name": "c", "image": "z"}]
    assert out["spec"]["args"] == ["3"]  # no merge key: replaced


def test_label_and_field_selectors() -> None:
    """Equality, inequality, set and existence terms; malformed terms are rejected."""
    obj = {"metadata": {"name": "p", "labels": {"app": "web", "tier": "fe"}},
           "spec": {"nodeName": "n1"}, "type": "kubernetes.io/tls"}
    assert label_selector("app=web,tier in (fe,be),!canary,tier")(obj)
    assert not label_selector("app!=web")(obj)
    assert not label_selector("tier notin (fe)")(obj)
    assert field_selector("spec.nodeName=n1,type==kubernetes.io/tls")(obj)
    assert not field_selector("metadata.name!=p")(obj)
    with pytest.raises(SelectorError):
        field_selector("nonsense")
