"""TLS handshake settings (minimum/maximum version, TLS 1.2 cipher suites), checked as the
engine would check them.

Envoy refuses a listener whose TLS context names an unknown cipher or a maximum version below
the minimum, and a refused listener takes every host on it down. So the values are checked
here: one bad value is one clear message, and the engine keeps its defaults for that chain.

Three sources, each a full set of the three keys: the ``--tls-min-version`` /
``--tls-max-version`` / ``--tls-ciphers`` flags (``TranslateOptions.tls``, every HTTPS listener,
Ingress included), then, for a Gateway listener, its ``tls.options`` keys
``podway.io/tls-min-version``, ``podway.io/tls-max-version`` and ``podway.io/tls-ciphers``
(comma-separated), which override the flags key by key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from podway.ir import TLSOptions
from podway.translate import annotations as ann
from podway.translate.core.problems import quote

VERSIONS = ("1.0", "1.1", "1.2", "1.3")
OPTION_KEYS = (ann.TLS_MIN_VERSION.name, ann.TLS_MAX_VERSION.name, ann.TLS_CIPHERS.name)
#: TLS 1.2 (and older) cipher suites the engine's BoringSSL knows, in OpenSSL names.
KNOWN_CIPHERS = frozenset({
    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-PSK-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-SHA", "ECDHE-RSA-AES128-SHA", "ECDHE-PSK-AES128-CBC-SHA",
    "ECDHE-ECDSA-AES256-SHA", "ECDHE-RSA-AES256-SHA", "ECDHE-PSK-AES256-CBC-SHA",
    "AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-SHA", "AES256-SHA",
    "PSK-AES128-CBC-SHA", "PSK-AES256-CBC-SHA", "DES-CBC3-SHA",
})


class TLSOptionError(ValueError):
    """A value the engine would refuse; the message names it."""


def check_version(value: str, what: str) -> str:
    v = value.strip().removeprefix("TLSv").removeprefix("tlsv")
    if v not in VERSIONS:
        raise TLSOptionError(f"{what} {quote(value)} is not one of {', '.join(VERSIONS)}")
    return v


def check_ciphers(value: str, what: str) -> tuple[str, ...]:
    """Comma-separated suites; a ``[A|B]`` group (equal preference) is allowed as one item."""
    out: list[str] = []
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        names = item.removeprefix("[").removesuffix("]").split("|")
        unknown = [n for n in names if n not in KNOWN_CIPHERS]
        if unknown:
            raise TLSOptionError(f"{what}: cipher {quote(unknown[0])} is not a TLS 1.2 suite "
                                 "the engine knows (OpenSSL names, e.g. "
                                 "ECDHE-RSA-AES128-GCM-SHA256)")
        out.append(item)
    if not out:
        raise TLSOptionError(f"{what} names no cipher")
    return tuple(out)


def check_range(options: TLSOptions, what: str) -> TLSOptions:
    low, high = options.min_version, options.max_version
    if low is not None and high is not None and VERSIONS.index(high) < VERSIONS.index(low):
        raise TLSOptionError(f"{what}: maximum version {high} is below minimum {low}")
    return options


def from_flags(min_version: str | None, max_version: str | None,
               ciphers: str | None) -> TLSOptions:
    """The flags' options; TLSOptionError on a bad value."""
    out = TLSOptions(
        min_version=check_version(min_version, "--tls-min-version") if min_version else None,
        max_version=check_version(max_version, "--tls-max-version") if max_version else None,
        ciphers=check_ciphers(ciphers, "--tls-ciphers") if ciphers else ())
    return check_range(out, "--tls-min-version/--tls-max-version")


def from_listener_options(options: Mapping[str, str], base: TLSOptions) -> TLSOptions:
    """``base`` overridden by a Gateway listener's ``tls.options``; TLSOptionError on a bad
    value (other keys are left to ``unknown_keys``)."""
    out = base
    low, high, ciphers = OPTION_KEYS
    if low in options:
        out = replace(out, min_version=check_version(options[low], low))
    if high in options:
        out = replace(out, max_version=check_version(options[high], high))
    if ciphers in options:
        out = replace(out, ciphers=check_ciphers(options[ciphers], ciphers))
    return check_range(out, "tls.options")


def unknown_keys(options: Mapping[str, str]) -> list[str]:
    return sorted(k for k in options if k not in OPTION_KEYS)
