"""ingress-nginx's ConfigMap keys (``--nginx-config``): defaults, values, errors."""

from __future__ import annotations

import pytest

from podway.translate.core.nginx_config import NginxConfig, parse


def test_ingress_nginx_defaults() -> None:
    assert parse(()).hsts_value == "max-age=31536000; includeSubDomains"


def test_each_key_changes_the_header() -> None:
    assert parse(["hsts-max-age=60", "hsts-preload=true"]).hsts_value == (
        "max-age=60; includeSubDomains; preload")
    assert parse(["hsts-include-subdomains=false"]).hsts_value == "max-age=31536000"
    assert parse(["hsts=false", "hsts-preload=true"]).hsts_value is None
    assert parse(["hsts = off"]) == NginxConfig(hsts=False)


@pytest.mark.parametrize(("pair", "words"), [
    ("hsts", "is not KEY=VALUE"), ("hsts=maybe", "not true or false"),
    ("hsts-max-age=-1", "not a number"), ("hsts-max-age=1d", "not a number"),
    ("custom-http-errors=404", "not a setting Podway serves")])
def test_a_bad_pair_is_one_line_naming_it(pair: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as caught:
        parse([pair])
    assert "\n" not in str(caught.value)
