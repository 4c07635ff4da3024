"""An Event's ``involvedObject.apiVersion`` is the kind's own, from the kinds table."""

from __future__ import annotations

import pytest

from podway.model.base import ObjectRef
from podway.programs.controller.events import Due, _event_body


@pytest.mark.parametrize(("kind", "api_version"), [
    ("Service", "v1"), ("Ingress", "networking.k8s.io/v1"),
    ("HTTPRoute", "gateway.networking.k8s.io/v1"),
    ("TLSRoute", "gateway.networking.k8s.io/v1alpha2"),
    ("TrafficPolicy", "podway.io/v1alpha1"),
])
def test_involved_object_names_the_kinds_api_version(kind: str, api_version: str) -> None:
    """Not one fallback version for every kind outside a short list (a TLSRoute is v1alpha2)."""
    due = Due(ref=ObjectRef(kind=kind, namespace="ns", name="x"), type="Warning", reason="R",
              message="m")
    body = _event_body(due, name="x.1", namespace="ns", stamp="2026-01-01T00:00:00Z")
    assert body["involvedObject"]["apiVersion"] == api_version
