"""The NodePortLocal annotation codec never raises, whatever the annotation holds."""

from __future__ import annotations

from podway.model import npl


def test_deeply_nested_annotation_is_an_error_not_a_crash() -> None:
    """JSON nested past the recursion limit decodes to no entries and an error message."""
    entries, error = npl.decode("[" * 100_000 + "]" * 100_000)
    assert entries == frozenset()
    assert error is not None
    assert error.startswith("not JSON")
