"""The model refuses values the API server would refuse instead of coercing them."""

from __future__ import annotations

import pytest

from podway.model.loader import load_text

SERVICE = """
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: d}}
spec: {{ports: [{{port: {port}}}]}}
"""
INGRESS = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: web, namespace: d}}
spec:
  defaultBackend: {{service: {{name: web, port: {{number: {port}}}}}}}
"""
SLICE = """
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: web, namespace: d}}
endpoints: [{{addresses: [198.18.0.1], conditions: {{ready: {ready}}}}}]
"""


@pytest.mark.parametrize("port", ["true", "false", "'80'", "80.5", "0", "70000"])
def test_a_port_that_is_not_an_integer_in_range_is_a_load_error(port: str) -> None:
    """`port: true` no longer becomes port 1, nor "80" port 80, in any port field."""
    for template in (SERVICE, INGRESS):
        loaded = load_text(template.format(port=port))
        assert not loaded.objects, template
        assert loaded.errors


def test_a_valid_port_still_loads() -> None:
    """Integers in range load as before."""
    assert load_text(SERVICE.format(port=80)).objects


def test_endpoint_conditions_are_strict_booleans() -> None:
    """`ready: "yes"` is refused rather than read as true."""
    assert not load_text(SLICE.format(ready='"yes"')).objects
    assert load_text(SLICE.format(ready="false")).objects


@pytest.mark.parametrize(("name", "namespace"), [
    ("Web", "d"), ("web_1", "d"), ("x" * 254, "d"), ("web", "Team"), ("web", "a.b"),
    ("web", "n" * 64)])
def test_names_outside_kubernetes_rules_are_load_errors(name: str, namespace: str) -> None:
    """Object names are RFC 1123 subdomains and namespaces labels, as the API server checks:
    nothing else reaches engine resource names or messages."""
    text = f"""
apiVersion: v1
kind: Service
metadata: {{name: "{name}", namespace: "{namespace}"}}
"""
    loaded = load_text(text)
    assert not loaded.objects
    assert loaded.errors


def test_gateway_listener_names_are_section_names() -> None:
    """A listener name with spaces is refused on load."""
    text = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: d}
spec:
  gatewayClassName: podway
  listeners: [{name: "my listener", port: 80, protocol: HTTP}]
"""
    assert not load_text(text).objects
