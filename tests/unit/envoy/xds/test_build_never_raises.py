"""Whatever the translator makes of arbitrary manifests, the xDS build takes it (Hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from podway.envoy.config import build
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.dump import files
from podway.model import Snapshot
from podway.model.loader import parse_object
from podway.translate import translate
from tests.unit.translate.strategies import manifests


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests)
def test_build_never_raises_on_translator_output(docs: list[Any]) -> None:
    """Any translation result builds, versions and dumps without an exception."""
    objects = [obj for i, doc in enumerate(docs)
               if (obj := parse_object(doc, document=i)[0]) is not None]
    resources = build(translate(Snapshot.of_objects(objects)).ir)
    Cache().set(resources)
    assert all(text.startswith("[") for text in files(resources).values())
