"""The ingress-nginx annotation reader: ingress-nginx's defaults and units, typed issues."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podway.translate.ingress.nginx import serve
from podway.translate.ingress.nginx.annotations import (
    PREFIX,
    SERVED,
    Affinity,
    AuthTLS,
    BackendProtocol,
    Canary,
    Cors,
    NginxAnnotations,
    Reason,
    Redirect,
    Rewrite,
    VerifyClient,
    advice,
    read,
)


def nginx(**values: str) -> dict[str, str]:
    return {PREFIX + k.replace("_", "-"): v for k, v in values.items()}


def keys(result: NginxAnnotations) -> list[str]:
    return [i.key.removeprefix(PREFIX) for i in result.issues]


def test_no_nginx_annotations_read_as_empty() -> None:
    """Other annotations are not this reader's business."""
    found = read({"podway.io/ssl-redirect": "false"}, namespace="a")
    assert found.empty
    assert not found.issues
    assert not found.unserved


def test_rewrite_target_turns_on_regex_paths() -> None:
    """rewrite-target alone makes the paths regexes, as in ingress-nginx."""
    found = read(nginx(rewrite_target="/$2"), namespace="a")
    assert found.rewrite == Rewrite(target="/$2", use_regex=False)
    assert found.rewrite.regex_paths
    assert read(nginx(use_regex="true"), namespace="a").rewrite == Rewrite(use_regex=True)
    assert read(nginx(use_regex="false"), namespace="a").rewrite is None


def test_bad_rewrite_target_is_one_issue() -> None:
    """$0 is not a capture group and whitespace is not a path: the path is kept."""
    for bad in ("/$0", "/a b"):
        found = read(nginx(rewrite_target=bad), namespace="a")
        assert found.rewrite is None
        assert keys(found) == ["rewrite-target"]


@pytest.mark.parametrize("url", ["http://a:99999/", "http://a:x/", "https://[::1/x",
                                 "http://a:0/", "//a:70000/p", "http://:80/"])
def test_a_redirect_url_whose_authority_does_not_read_is_refused(url: str) -> None:
    """An InvalidAnnotation, and no redirect: serving it raised in the translation."""
    found = read(nginx(permanent_redirect=url), namespace="a")
    assert found.redirect is None
    assert [i.reason for i in found.issues] == [Reason.INVALID_ANNOTATION]


def test_redirect_urls_that_read_are_served() -> None:
    for url, port in (("http://a:8080/x", 8080), ("//a/p", None), ("/p?q=1", None)):
        found = read(nginx(permanent_redirect=url), namespace="a")
        answer = serve.redirect(found)
        assert answer is not None, url
        assert answer.port == port, url


def test_redirects_default_codes_and_precedence() -> None:
    """permanent-redirect wins over temporal-redirect; codes default to 301 and 302."""
    both = read(nginx(permanent_redirect="https://x.example/", temporal_redirect="/t"),
                namespace="a")
    assert both.redirect == Redirect(url="https://x.example/", code=301, permanent=True)
    temp = read(nginx(temporal_redirect="/t", temporal_redirect_code="307"), namespace="a")
    assert temp.redirect == Redirect(url="/t", code=307, permanent=False)
    bad = read(nginx(permanent_redirect="/p", permanent_redirect_code="304"), namespace="a")
    assert bad.redirect is not None
    assert bad.redirect.code == 301
    assert keys(bad) == ["permanent-redirect-code"]


def test_body_size_units() -> None:
    """nginx sizes: bytes, k, m, g (1024-based); 0 is no limit; junk is an issue."""
    for text, size in (("0", 0), ("100", 100), ("8m", 8 << 20), ("512K", 512 << 10),
                       ("1g", 1 << 30)):
        found = read(nginx(proxy_body_size=text), namespace="a").body_size
        assert found is not None
        assert found.limit_bytes == size
    assert keys(read(nginx(proxy_body_size="8mb"), namespace="a")) == ["proxy-body-size"]


def test_timeouts_are_seconds_unless_a_unit_is_given() -> None:
    """ingress-nginx timeouts are whole seconds; nginx time units are read too."""
    found = read(nginx(proxy_connect_timeout="5", proxy_read_timeout="2m",
                       proxy_send_timeout="0"), namespace="a")
    assert found.timeouts is not None
    assert (found.timeouts.connect_ms, found.timeouts.read_ms) == (5000, 120_000)
    assert found.timeouts.send_ms is None
    assert keys(found) == ["proxy-send-timeout"]


def test_backend_protocols() -> None:
    """HTTP/HTTPS/GRPC/GRPCS served, AUTO_HTTP is HTTP, FCGI unsupported, junk invalid."""
    assert read(nginx(backend_protocol="grpcs"), namespace="a").backend_protocol is (
        BackendProtocol.GRPCS)
    assert read(nginx(backend_protocol="AUTO_HTTP"), namespace="a").backend_protocol is (
        BackendProtocol.HTTP)
    fcgi = read(nginx(backend_protocol="FCGI"), namespace="a")
    assert fcgi.backend_protocol is None
    assert fcgi.issues[0].reason is Reason.UNSUPPORTED_ANNOTATION
    junk = read(nginx(backend_protocol="SPDY"), namespace="a")
    assert junk.issues[0].reason is Reason.INVALID_ANNOTATION


def test_affinity_cookie() -> None:
    """affinity: cookie with ingress-nginx's default cookie name; max-age beats expires."""
    assert read(nginx(affinity="cookie"), namespace="a").affinity == Affinity()
    found = read(nginx(affinity="cookie", session_cookie_name="route",
                       session_cookie_expires="60", session_cookie_max_age="30",
                       session_cookie_path="/app"), namespace="a")
    assert found.affinity == Affinity(cookie_name="route", max_age_s=30, path="/app")
    orphan = read(nginx(session_cookie_name="x"), namespace="a")
    assert orphan.affinity is None
    assert keys(orphan) == ["affinity"]


def test_source_ranges_normalise_and_fail_closed() -> None:
    """CIDRs are normalised; an unreadable entry marks the allowlist incomplete (refuse all)."""
    found = read(nginx(whitelist_source_range="10.0.0.1/8, 192.0.2.7",
                       denylist_source_range="10.1.0.0/16"), namespace="a").source_ranges
    assert found is not None
    assert found.complete
    assert found.allow == ("10.0.0.0/8", "192.0.2.7/32")
    assert found.deny == ("10.1.0.0/16",)
    bad = read(nginx(allowlist_source_range="10.0.0.0/8,nonsense"), namespace="a")
    assert bad.source_ranges is not None
    assert not bad.source_ranges.complete
    assert keys(bad) == ["allowlist-source-range"]
    empty = read(nginx(whitelist_source_range=" , "), namespace="a")
    assert empty.source_ranges is not None
    assert not empty.source_ranges.complete


def test_cors_defaults_and_fields() -> None:
    """enable-cors alone gives ingress-nginx's defaults; fields override them."""
    assert read(nginx(enable_cors="true"), namespace="a").cors == Cors()
    found = read(nginx(enable_cors="true", cors_allow_origin="https://a.example, https://*.b.io",
                       cors_allow_methods="get, post", cors_allow_credentials="false",
                       cors_max_age="60", cors_expose_headers="X-Id"), namespace="a").cors
    assert found == Cors(allow_origins=("https://a.example", "https://*.b.io"),
                         allow_methods=("GET", "POST"), allow_credentials=False, max_age_s=60,
                         expose_headers=("X-Id",))
    orphan = read(nginx(cors_allow_origin="*"), namespace="a")
    assert orphan.cors is None
    assert keys(orphan) == ["enable-cors"]


def test_canary() -> None:
    """canary-* apply only with canary: true; a header value needs the header."""
    found = read(nginx(canary="true", canary_by_header="X-Canary", canary_by_header_value="yes",
                       canary_by_cookie="beta", canary_weight="20"), namespace="a")
    assert found.canary == Canary(by_header="X-Canary", header_value="yes", by_cookie="beta",
                                  weight=20)
    assert read(nginx(canary_weight="20"), namespace="a").canary is None
    over = read(nginx(canary="true", canary_weight="150"), namespace="a")
    assert over.canary == Canary()
    assert keys(over) == ["canary-weight"]
    total = read(nginx(canary="true", canary_weight="150", canary_weight_total="1000"),
                 namespace="a")
    assert total.canary == Canary(weight=150, weight_total=1000)


def test_auth_tls_secret_and_fail_closed() -> None:
    """auth-tls-secret is namespace/name (own namespace when bare); junk refuses clients."""
    found = read(nginx(auth_tls_secret="certs/ca", auth_tls_verify_client="optional",
                       auth_tls_verify_depth="2"), namespace="a").auth_tls
    assert found == AuthTLS(namespace="certs", name="ca", verify=VerifyClient.OPTIONAL, depth=2)
    bare = read(nginx(auth_tls_secret="ca"), namespace="a").auth_tls
    assert bare is not None
    assert (bare.namespace, bare.name) == ("a", "ca")
    bad = read(nginx(auth_tls_secret="Not A Name"), namespace="a")
    assert bad.auth_tls is not None
    assert bad.auth_tls.name == ""


def test_ssl_passthrough_is_read() -> None:
    """ssl-passthrough is a flag, false unless set."""
    assert read(nginx(ssl_passthrough="true"), namespace="a").ssl_passthrough
    assert not read(nginx(ssl_passthrough="false"), namespace="a").ssl_passthrough


def test_unserved_keys_are_listed_with_advice() -> None:
    """Every key under the prefix that no family reads is listed, sorted."""
    found = read(nginx(configuration_snippet="more_set_headers x;", server_snippet="",
                       ssl_redirect="false", made_up_key="1"), namespace="a")
    assert found.unserved == (PREFIX + "configuration-snippet", PREFIX + "made-up-key",
                              PREFIX + "server-snippet")
    assert "nginx configuration" in advice(PREFIX + "configuration-snippet")
    assert "auth-url" in advice("auth-type")
    assert advice("made-up-key") == "Podway does not serve it"


def test_every_served_key_is_read_by_its_family() -> None:
    """A served key never lands in ``unserved`` (the SERVED table and the reader agree)."""
    everything = {PREFIX + k: "1" for family in SERVED.values() for k in family}
    assert read(everything, namespace="a").unserved == ()


@given(st.dictionaries(st.sampled_from([PREFIX + k for f in SERVED.values() for k in f]
                                       + [PREFIX + "server-snippet"]),
                       st.text(max_size=40), max_size=12))
def test_reader_never_raises(annotations: dict[str, str]) -> None:
    """Any values give a value and issues, never an exception, and the same value twice."""
    assert read(annotations, namespace="a") == read(annotations, namespace="a")
