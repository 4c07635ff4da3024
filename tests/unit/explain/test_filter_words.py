"""``explain`` names every filter a route can carry, including the ingress-nginx ones."""

from __future__ import annotations

from podway.explain.words import filter_text
from podway.ir import BodyLimit, ClientAccess, RateLimit, URLRewrite


def test_access_rate_and_body_limits_read_as_words() -> None:
    """Client access, rate limits, body limits and regex rewrites each say what they do."""
    assert filter_text(ClientAccess(allow=("198.18.0.0/15",), deny=("198.18.1.0/24",))) == (
        "clients allowed: 198.18.0.0/15 except 198.18.1.0/24 (others get 403)")
    assert filter_text(ClientAccess()) == "clients allowed: any address (others get 403)"
    assert filter_text(RateLimit(requests=5, burst=25, status=503)) == (
        "rate limit per client address: 5 per 1000 ms, bursts of 25 (then 503)")
    assert filter_text(BodyLimit(max_bytes=1024)) == (
        "request bodies up to 1024 bytes (larger: 413)")
    assert filter_text(URLRewrite(pattern="^/a(.*)$", substitution="/\\1")) == (
        "rewrite: path matching ^/a(.*)$ → /\\1")
