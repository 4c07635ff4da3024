"""Hostname validation, wildcard coverage (Ingress: one label; Gateway API: any) and a
request's Host as the engine matches it."""

from __future__ import annotations

import pytest

from podway.ir import WildcardMode
from podway.ir.hosts import covers, host_order, request_host
from podway.translate.core.hosts import valid_hostname


@pytest.mark.parametrize(("host", "ok"), [
    ("foo.example.com", True),
    ("*.example.com", True),
    ("localhost", True),
    ("a-b.c", True),
    ("Foo.example.com", False),
    ("*", False),
    ("foo.*.com", False),
    ("198.18.0.1", False),
    ("-bad.example.com", False),
    ("a" * 64 + ".com", False),
    ("", False),
])
def test_valid_hostname(host: str, ok: bool) -> None:
    """Lowercase DNS names with an optional leading wildcard label are valid; IPs are not."""
    assert valid_hostname(host) is ok


def test_wildcard_modes() -> None:
    """Ingress wildcards cover one label, Gateway API wildcards any number, never the suffix."""
    assert covers("*.foo.com", "a.foo.com")
    assert not covers("*.foo.com", "a.b.foo.com")
    assert covers("*.foo.com", "a.b.foo.com", WildcardMode.SUFFIX)
    assert not covers("*.foo.com", "foo.com", WildcardMode.SUFFIX)
    assert covers("*", "anything")


def test_host_order_exact_then_longest_wildcard_then_catch_all() -> None:
    """Sorting by host_order puts exact names first and the catch-all last."""
    hosts = ["*", "*.com", "b.com", "*.a.com", "a.com"]
    assert sorted(hosts, key=host_order) == ["a.com", "b.com", "*.a.com", "*.com", "*"]


@pytest.mark.parametrize(("sent", "matched"), [
    ("Shop.Example.COM", "shop.example.com"),
    ("shop.example.com.", "shop.example.com"),
    ("shop.example.com.:8443", "shop.example.com"),
    ("SHOP.example.com:80", "shop.example.com"),
    ("shop.example.com..", "shop.example.com."),
    ("shop.example.com:http", "shop.example.com:http"),
    ("[fc00::1]:80", "[fc00::1]"),
    ("[fc00::1]", "[fc00::1]"),
])
def test_request_host_is_the_host_as_the_engine_matches_it(sent: str, matched: str) -> None:
    """Envoy's strip_trailing_host_dot + strip_any_host_port: one dot and a numeric port go,
    case does not matter."""
    assert request_host(sent) == matched
