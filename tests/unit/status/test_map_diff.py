"""``MapDiff`` names exactly the keys whose values were added, replaced (by identity) or removed,
over random edits of a map — in place (the aligned, pairwise path), keys appended or removed
anywhere, rebuilt in another order (the id-index path) — and ``follow`` trusts a producer's
keys only when their base is the version seen last."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podway.base.mapdiff import MapDiff, _aligned_changes

KEYS = st.integers(0, 30)
edit = st.one_of(
    st.tuples(st.just("put"), KEYS),  # a new value (a new object) under a key, old or new
    st.tuples(st.just("drop"), KEYS),
    st.tuples(st.just("copy"), KEYS),  # an equal map, not the same object, no value replaced
    st.tuples(st.just("shuffle"), st.integers(0, 2**16)),  # the same items in another order
)


def _naive(old: dict[int, object], new: dict[int, object]) -> set[int]:
    return {k for k in old.keys() | new.keys() if old.get(k) is not new.get(k)}


@given(st.lists(KEYS, max_size=20, unique=True), st.lists(st.lists(edit, max_size=4),
                                                           max_size=10))
def test_map_diff_names_exactly_what_changed(start: list[int],
                                             steps: list[list[tuple[str, int]]]) -> None:
    current: dict[int, object] = {k: object() for k in start}
    diff: MapDiff[int] = MapDiff()
    assert set(diff.update(current)) == set(current)
    for step in steps:
        new = dict(current)
        for action, arg in step:
            if action == "put":
                new[arg] = object()
            elif action == "drop":
                new.pop(arg, None)
            elif action == "shuffle":
                items = list(new.items())
                items = items[arg % (len(items) or 1):] + items[:arg % (len(items) or 1)]
                new = dict(reversed(items) if arg % 2 else items)
        got = diff.update(new)
        assert len(got) == len(set(got))
        assert set(got) == _naive(current, new)
        current = new


def test_aligned_path_takes_in_place_edits_and_appends_only() -> None:
    """A map copied and edited in place, or with keys appended, is compared pairwise; a key
    removed from the middle (or keys reordered) is not aligned: the caller indexes instead."""
    old = {k: object() for k in "abcd"}
    edited = {**old, "b": object(), "e": object()}
    assert _aligned_changes(old, edited) == ["b", "e"]
    shortened = {k: old[k] for k in "abc"}
    assert _aligned_changes(old, shortened) == ["d"]
    assert _aligned_changes(old, {k: old[k] for k in "acd"}) is None
    assert _aligned_changes(old, {k: old[k] for k in "bacd"}) is None


def test_known_keys_are_trusted_only_from_the_version_seen_last() -> None:
    diff: MapDiff[str] = MapDiff()
    first = {"a": object(), "b": object()}
    diff.update(first)
    second = {**first, "b": object()}
    assert diff.update(second, known=(first, ["b"])) == ["b"]
    third = {**second, "a": object()}
    fourth = {**third, "c": object()}
    # the producer's base (third) was never seen: a real diff from second
    assert sorted(diff.update(fourth, known=(third, ["c"]))) == ["a", "c"]
    assert diff.update(fourth, known=(fourth, ["x"])) == []
