"""The loader and the translator report problems; they never raise, whatever the manifests."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podway.ir.dump import to_yaml
from podway.model import Snapshot
from podway.model.loader import load_text, parse_object
from podway.translate import translate

from .strategies import manifests


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests)
def test_translate_never_raises(docs: list[Any]) -> None:
    """Arbitrary, mostly plausible manifests load and translate without an exception."""
    objects = []
    for i, doc in enumerate(docs):
        obj, error = parse_object(doc, document=i)
        assert obj is None or error is None
        if obj is not None:
            objects.append(obj)
    result = translate(Snapshot.of_objects(objects))
    to_yaml(result.ir)  # the dump of any result works too


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_loader_never_raises_on_any_text(text: str) -> None:
    """Any text, YAML or not, loads into objects and errors without an exception."""
    result = load_text(text)
    assert all(str(e) for e in result.errors)


@settings(max_examples=100, deadline=None)
@given(manifests)
def test_loader_round_trips_yaml_documents(docs: list[Any]) -> None:
    """A multi-document YAML of the manifests loads exactly like the documents one by one."""
    text = yaml.safe_dump_all(docs)
    from_text = load_text(text)
    one_by_one = [parse_object(d, source="<text>", document=i) for i, d in enumerate(docs)]
    assert len(from_text.objects) == sum(1 for obj, _ in one_by_one if obj is not None)
    assert len(from_text.errors) == sum(1 for _, err in one_by_one if err is not None)
