"""Gateway API translation never raises and never depends on the order objects arrive in."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podway.model import Snapshot
from podway.model.loader import parse_object
from podway.readers.render.report import report_yaml
from podway.translate import translate

from .gateway_strategies import gateway_manifests


def _objects(docs: list[Any]) -> list[Any]:
    """Loaded objects, one per (kind, namespace, name), as a source would deliver them."""
    out = {}
    for i, doc in enumerate(docs):
        obj, _ = parse_object(doc, document=i)
        if obj is not None:
            out.setdefault((obj.KIND, *obj.key), obj)
    return list(out.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gateway_manifests)
def test_gateway_translate_never_raises(docs: list[Any]) -> None:
    """Arbitrary, mostly plausible Gateway API manifests translate and render without raising."""
    result = translate(Snapshot.of_objects(_objects(docs)))
    report_yaml(result)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gateway_manifests, st.randoms(use_true_random=False))
def test_gateway_translation_is_order_independent(docs: list[Any], rnd: Any) -> None:
    """Shuffling the objects changes nothing: IR, problems and statuses are deterministic."""
    objects = _objects(docs)
    first = report_yaml(translate(Snapshot.of_objects(objects)))
    rnd.shuffle(objects)
    assert report_yaml(translate(Snapshot.of_objects(objects))) == first
