"""TLS versions and ciphers: what the engine would refuse is refused here, in one message."""

from __future__ import annotations

import pytest

from podway.ir import TLSOptions
from podway.translate.core.tls_options import (
    TLSOptionError,
    check_ciphers,
    from_flags,
    from_listener_options,
)


def test_flags_parse_versions_and_cipher_groups() -> None:
    """Versions with or without the TLSv prefix; a bracketed group counts as one entry."""
    got = from_flags("TLSv1.2", "1.3", "ECDHE-RSA-AES128-GCM-SHA256, "
                     "[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]")
    assert got == TLSOptions(min_version="1.2", max_version="1.3", ciphers=(
        "ECDHE-RSA-AES128-GCM-SHA256",
        "[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]"))
    assert from_flags(None, None, None) == TLSOptions()


@pytest.mark.parametrize(("args", "words"), [
    (("1.4", None, None), "'1.4' is not one of"),
    (("1.3", "1.2", None), "maximum version 1.2 is below minimum 1.3"),
    ((None, None, "RC4-MD5"), "'RC4-MD5' is not a TLS 1.2 suite"),
    ((None, None, "[AES128-SHA|NOPE]"), "'NOPE'"),
    ((None, None, " , "), "names no cipher"),
])
def test_values_the_engine_refuses_are_errors(args: tuple[str | None, str | None, str | None],
                                              words: str) -> None:
    """Each bad value is a TLSOptionError naming it (the engine would NACK the listener)."""
    with pytest.raises(TLSOptionError, match=words.replace("[", r"\[").replace("|", r"\|")):
        from_flags(*args)


def test_listener_options_override_the_flags_key_by_key() -> None:
    """A Gateway listener's keys replace the flags' values; other keys are ignored."""
    base = TLSOptions(min_version="1.2", ciphers=("AES128-SHA",))
    got = from_listener_options({"podway.io/tls-min-version": "1.3", "vendor/x": "y"}, base)
    assert got == TLSOptions(min_version="1.3", ciphers=("AES128-SHA",))
    with pytest.raises(TLSOptionError):
        from_listener_options({"podway.io/tls-max-version": "1.1"}, base)


def test_cipher_check_keeps_order() -> None:
    """Preference order is the order written."""
    assert check_ciphers("AES256-SHA,AES128-SHA", "x") == ("AES256-SHA", "AES128-SHA")
