"""RE2 checks: what Envoy would refuse is reported before it reaches the engine."""

from __future__ import annotations

import pytest

from podway.translate.core.regex import re2_problem


@pytest.mark.parametrize("pattern", ["/foo/.*", "^/v[0-9]+/items$", "(?i)abc", "[[:alpha:]]+"])
def test_re2_patterns_pass(pattern: str) -> None:
    """Ordinary RE2 patterns have no problem."""
    assert re2_problem(pattern) is None


@pytest.mark.parametrize(("pattern", "words"), [
    ("/(?!admin).*", "not a valid RE2"),  # lookahead: Python accepts it, RE2 does not
    (r"(a)\1", "not a valid RE2"),  # backreference
    ("[a-z]{3,50}x(a|b|c)", "too complex"),  # over Envoy's program-size limit
])
def test_patterns_envoy_refuses_are_reported(pattern: str, words: str) -> None:
    """Patterns RE2 rejects, or Envoy's size limit rejects, come back as a reason."""
    problem = re2_problem(pattern)
    assert problem is not None
    assert words in problem
