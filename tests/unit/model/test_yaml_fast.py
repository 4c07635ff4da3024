"""The lean loader gives PyYAML's safe loader's values and errors, and takes its lean path for
plain documents (the point of it: the cold start's parse)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from podway.model import yaml_fast
from podway.model.yaml_fast import FastSafeLoader

REFERENCE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

CASES = [
    "a: 1\nb: [x, 'y', \"z\"]\nc: {d: null, e: ~, f: true, g: no, h: on, i: 0o17, j: 017}\n",
    "when: 2001-12-14t21:59:43.10-05:00\nday: 2002-12-14\nblob: !!binary aGVsbG8=\n",
    "nums: [1_000, 0x1F, 1.5e3, .inf, -.inf, .nan, +12, '12', 12.0]\n",
    "dup: 1\ndup: 2\n",
    "merge:\n  <<: {a: 1, b: 2}\n  b: 3\n",  # a merge key without anchors: PyYAML's path
    "= : equals\n",  # the value key
    "? [a, b]\n: unhashable\n",  # a collection as a key: PyYAML's error
    "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\np: !!pairs [{a: 1}]\n",
    "x: !custom 1\n",  # an unknown tag: PyYAML's error
    "anchored: &a {k: v}\nalias: *a\n",  # anchors: PyYAML's path (shared objects)
    "---\nfirst: 1\n---\n- second\n---\n",  # several documents, one empty
    "text: |\n  two\n  lines\nfolded: >\n  one\n  line\nkey with spaces: v\n1: int key\n",
    "null: n\ntrue: t\n3.5: f\n",  # non-string scalar keys
    "'quoted: yes': 'no'\n\"12\": \"true\"\n",
    "a: \"string with & inside\"\nb: 2\n",  # '&' in text: the general path, same values
]


def load(text: str, loader: type[yaml.SafeLoader]) -> tuple[str, Any]:
    try:
        return "ok", list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("text", CASES)
def test_same_values_and_errors_as_the_safe_loader(text: str) -> None:
    expected = load(text, REFERENCE)
    got = load(text, FastSafeLoader)
    assert got == expected
    if expected[0] == "ok":  # the same types too (True is not 1, a date is not a string)
        assert repr(got[1]) == repr(expected[1])


def test_plain_documents_take_the_lean_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """No anchors, only maps, lists and plain scalars: PyYAML's general constructor is never
    called (it is what the cold start's parse spent 85 % in)."""
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the general constructor was used")

    monkeypatch.setattr(yaml.constructor.BaseConstructor, "construct_object", refuse)
    text = ("apiVersion: v1\nkind: Service\nmetadata: {name: web, labels: {a: 'b'}}\n"
            "spec: {ports: [{port: 80, name: http}], x: 1.5, y: null, z: 2024-01-02}\n")
    (doc,) = yaml.load_all(text, Loader=FastSafeLoader)
    assert doc["spec"] == {"ports": [{"port": 80, "name": "http"}], "x": 1.5, "y": None,
                           "z": datetime.date(2024, 1, 2)}


def test_tags_are_resolved_once_per_value() -> None:
    loader = FastSafeLoader("a: [80, 80, yes, http]\n")
    try:
        assert loader.get_single_data() == {"a": [80, 80, True, "http"]}
        assert loader._tags == {"a": "tag:yaml.org,2002:str", "80": "tag:yaml.org,2002:int",
                                "yes": "tag:yaml.org,2002:bool",
                                "http": "tag:yaml.org,2002:str"}
    finally:
        loader.dispose()


def test_the_tag_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_fast, "_CACHE_LIMIT", 3)
    text = "[" + ", ".join(f"v{i}" for i in range(10)) + "]\n"
    loader = FastSafeLoader(text)
    try:
        assert loader.get_single_data() == [f"v{i}" for i in range(10)]
        assert len(loader._tags) <= 3
    finally:
        loader.dispose()


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                     st.floats(allow_nan=False), st.dates())
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(_VALUES, st.booleans())
def test_any_dumped_value_loads_the_same(value: Any, flow: bool) -> None:
    text = yaml.safe_dump(value, default_flow_style=flow)
    assert load(text, FastSafeLoader) == load(text, REFERENCE)


def _depth(value: Any, level: int = 1) -> int:
    """The deepest mapping or sequence in ``value`` (itself at ``level``), 0 for a scalar."""
    if isinstance(value, dict):
        return max([level, *(_depth(v, level + 1) for v in value.values())])
    if isinstance(value, list):
        return max([level, *(_depth(v, level + 1) for v in value)])
    return 0


def _measured(text: str) -> int | None:
    loader = FastSafeLoader(text)
    try:
        while loader.check_data():
            loader.get_data()
        return loader.deepest
    finally:
        loader.dispose()


@settings(max_examples=200, deadline=None)
@given(st.lists(_VALUES, min_size=1, max_size=3), st.booleans())
def test_the_lean_walk_measures_the_deepest_collection(values: list[Any], flow: bool) -> None:
    """The loader's depth limit trusts this figure instead of walking every value again."""
    text = yaml.safe_dump_all(values, default_flow_style=flow)
    # An '&' anywhere (even inside a string) sends the text down PyYAML's path: no figure.
    expected = None if "&" in text else max(_depth(v) for v in values)
    assert _measured(text) == expected


def test_no_depth_is_claimed_for_a_document_pyyaml_built() -> None:
    assert _measured("a: [[1]]\n---\n[x]\n") == 3
    # A merge key sends the second document to PyYAML's constructor: its depth is unknown.
    assert _measured("a: [[1]]\n---\nb:\n  <<: {c: [[[1]]]}\n") is None
    assert _measured("a: &x [1]\nb: *x\n") is None  # anchors: never the lean walk


def test_path_resolvers_still_apply_and_are_skipped_only_without_any() -> None:
    """The composer's per-node resolver hooks are no-op builtins only while no path resolver
    is registered; a loader class with one resolves by path exactly as PyYAML's does."""
    plain = FastSafeLoader("a: 1\n")
    try:
        assert plain.descend_resolver(None, None) is True  # the stand-in: nothing done
        assert plain.ascend_resolver() == ()
    finally:
        plain.dispose()

    class Pathed(FastSafeLoader):
        pass

    class PathedReference(REFERENCE):  # type: ignore[misc,valid-type]
        pass

    for cls in (Pathed, PathedReference):  # a quoted scalar at key "port" is an int
        cls.add_path_resolver("tag:yaml.org,2002:int", ["port"], yaml.ScalarNode)
    text = 'port: "80"\nother: "80"\n'
    assert yaml.load(text, Loader=Pathed) == yaml.load(text, Loader=PathedReference) == {
        "port": 80, "other": "80"}
