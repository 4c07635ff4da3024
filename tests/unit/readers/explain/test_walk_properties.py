"""explain never raises: any request against any golden case's IR gets an explanation with at
least one outcome; ``parse`` refuses bad input only with ``QueryError``."""

from __future__ import annotations

import contextlib
from functools import cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from podway.ir import IR
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.readers.explain import Context, Query, QueryError, explain, parse
from podway.translate import translate
from tests.golden.test_translate_golden import options_of

CASES = sorted((Path(__file__).parents[3] / "golden" / "translate").glob("*.in.yaml"))


@cache
def _case(i: int) -> tuple[IR, Context]:
    text = CASES[i].read_text()
    result = translate(Snapshot.of_objects(load_text(text, source="x").objects),
                       options_of(text))
    return result.ir, Context(problems=result.problems, mode="clusterip")


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_host = st.one_of(_text, st.sampled_from(["shop.example.com", "a.example.com", "x.y.example.com",
                                          "*", "", "198.18.0.10"]))


_queries = st.builds(
    Query, scheme=st.sampled_from(["http", "https", "tls", "tcp", "udp"]),
    port=st.sampled_from([80, 443, 53, 5432, 9000, 0]), host=_host,
    path=_text.map(lambda p: "/" + p), method=st.sampled_from(["GET", "POST", "X"]),
    headers=st.lists(st.tuples(_text, _text), max_size=3).map(tuple), sni=st.none() | _host,
    address=st.none() | st.sampled_from(["198.18.0.10", "0.0.0.0", "::1"]))


@settings(max_examples=300, deadline=None)
@given(case=st.integers(0, len(CASES) - 1), query=_queries)
def test_explain_never_raises(case: int, query: Query) -> None:
    ir, context = _case(case)
    out = explain(ir, query, context)
    assert out.verdict.outcomes
    assert out.to_data()["verdict"]["summary"]


@settings(max_examples=300, deadline=None)
@given(url=_text, headers=st.lists(_text, max_size=2), method=_text,
       source_ip=st.none() | _text)
def test_parse_refuses_only_with_query_error(url: str, headers: list[str], method: str,
                                              source_ip: str | None) -> None:
    for candidate in (url, "http://" + url, "tcp://" + url):
        with contextlib.suppress(QueryError):  # the one way to refuse
            parse(candidate, headers=headers, method=method or "GET", source_ip=source_ip)
