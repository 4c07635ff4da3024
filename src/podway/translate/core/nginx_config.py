"""ingress-nginx's controller-wide settings (its ConfigMap keys) for the classes Podway takes
over (``TranslateOptions.takeover_classes``): what an Ingress of such a class gets without
asking, as ingress-nginx gives it. Pure: no I/O.

``parse`` reads ``KEY=VALUE`` pairs (``podway run|controller|validate --nginx-config``) with
ingress-nginx's key names and defaults; an unknown key or a bad value raises ``ValueError``
with one line naming it.

- ``hsts`` (true): ``Strict-Transport-Security`` on HTTPS answers of a host that has a
  certificate of its own (a TLS entry naming it; not the default certificate), whatever the
  status, replacing a backend's own (ingress-nginx sets it in its response-header phase).
  Plain HTTP answers (the redirect to HTTPS included) carry none.
- ``hsts-max-age`` (31536000 s), ``hsts-include-subdomains`` (true), ``hsts-preload`` (false):
  the header's value, ``max-age=N[; includeSubDomains][; preload]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

HSTS_HEADER = "Strict-Transport-Security"
_TRUE = ("true", "1", "t", "on", "yes")
_FALSE = ("false", "0", "f", "off", "no")


@dataclass(frozen=True, slots=True, kw_only=True)
class NginxConfig:
    """ingress-nginx's ConfigMap settings Podway serves, with ingress-nginx's defaults."""

    hsts: bool = True
    hsts_max_age: int = 31_536_000
    hsts_include_subdomains: bool = True
    hsts_preload: bool = False

    @property
    def hsts_value(self) -> str | None:
        """The Strict-Transport-Security value of HTTPS answers (None: no header)."""
        if not self.hsts:
            return None
        value = f"max-age={self.hsts_max_age}"
        if self.hsts_include_subdomains:
            value += "; includeSubDomains"
        if self.hsts_preload:
            value += "; preload"
        return value


INGRESS_NGINX = NginxConfig()  # ingress-nginx's defaults
_BOOLS = {"hsts": "hsts", "hsts-include-subdomains": "hsts_include_subdomains",
          "hsts-preload": "hsts_preload"}
KEYS = (*_BOOLS, "hsts-max-age")


def parse(pairs: Iterable[str], base: NginxConfig = INGRESS_NGINX) -> NginxConfig:
    """``KEY=VALUE`` pairs over ``base`` (ingress-nginx's defaults)."""
    out = base
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise ValueError(f"{pair!r} is not KEY=VALUE")
        if key in _BOOLS:
            if value.lower() not in _TRUE + _FALSE:
                raise ValueError(f"{key}: {value!r} is not true or false")
            out = replace(out, **{_BOOLS[key]: value.lower() in _TRUE})
        elif key == "hsts-max-age":
            if not value.isdigit() or len(value) > 10:
                raise ValueError(f"{key}: {value!r} is not a number of seconds")
            out = replace(out, hsts_max_age=int(value))
        else:
            raise ValueError(f"{key!r} is not a setting Podway serves ({', '.join(KEYS)})")
    return out
