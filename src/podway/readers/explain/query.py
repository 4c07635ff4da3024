"""What ``podway explain`` is asked about: one request (or one L4 connection), parsed and checked.

``parse`` turns a URL and the command's flags into a ``Query`` or raises ``QueryError`` with
one line a user can act on. The Host is lower-cased and loses its port, and keeps a trailing
dot: the walk matches it as the engine does (``podway.ir.hosts.request_host``: port and one
trailing dot dropped, any case), so a ``Query`` built by hand is explained the same way. The
path is normalised as the engine does before matching (``normalize_path`` +
``merge_slashes``), and the query string is kept for query matches. The SNI defaults to the
URL's host without a trailing dot, as curl and browsers send it; ``--sni`` is lower-cased and
keeps a trailing dot (``podway.readers.explain.tls`` matches it as the engine does: such a name
matches no chain).
"""

from __future__ import annotations

import ipaddress
import posixpath
from dataclasses import dataclass
from urllib.parse import urlsplit

from podway.base.errors import ConfigError
from podway.ir.hosts import host_name, without_port

SCHEMES = ("http", "https", "tls", "tcp", "udp")
_DEFAULT_PORTS = {"http": 80, "https": 443, "tls": 443}


class QueryError(ConfigError):
    """A URL or flag of ``podway explain`` that cannot describe a request."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    scheme: str  # http, https, tls (passthrough), tcp, udp
    port: int
    host: str = ""  # Host header (HTTP) without port, lower case; "" when the URL gave an IP
    # (a trailing dot stays: the walk drops one, as the engine does)
    address: str | None = None  # the destination IP, when the URL names one
    path: str = "/"  # normalised, query string included
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()  # lower-case names, Host excluded
    sni: str | None = None  # TLS server name the client sends (None: none)
    source_ip: str | None = None

    @property
    def is_http(self) -> bool:
        return self.scheme in ("http", "https")

    @property
    def target(self) -> str:
        """``scheme://host:port/path`` as explained (after normalisation)."""
        where = self.host or self.address or "?"
        if self.address and self.host:
            where = f"{self.host} (at {self.address})"
        path = self.path if self.is_http else ""
        return f"{self.scheme}://{where}:{self.port}{path}"


def parse(url: str, *, headers: list[str] | tuple[str, ...] = (), method: str = "GET",
          sni: str | None = None, source_ip: str | None = None) -> Query:
    """The ``Query`` for a URL (``http://``, ``https://``, ``tls://``, ``tcp://``, ``udp://``)
    and the flags; ``QueryError`` for anything the engine could not be sent."""
    if "://" not in url:
        raise QueryError(f"{url!r} is not a URL: give one such as http://shop.test/cart or "
                         "tcp://198.18.0.10:5432")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise QueryError(f"{url!r} is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise QueryError(f"{url!r}: the scheme must be one of {', '.join(SCHEMES)}")
    host = (parts.hostname or "").lower()
    if not host_name(host):
        raise QueryError(f"{url!r} names no host")
    if port is None:
        if scheme not in _DEFAULT_PORTS:
            raise QueryError(f"{url!r}: {scheme}:// needs a port, e.g. {scheme}://{host}:5432")
        port = _DEFAULT_PORTS[scheme]
    address = _ip(host_name(host))
    pairs: list[tuple[str, str]] = []
    host_header = None if address else host
    for item in headers:
        name, sep, value = item.partition(":")
        name = name.strip().lower()
        if not sep or not name or any(c.isspace() for c in name):
            raise QueryError(f"--header {item!r} must look like 'Name: value'")
        if name == "host":
            host_header = without_port(value.strip()).lower()
        else:
            pairs.append((name, value.strip()))
    if source_ip is not None and _ip(source_ip) is None:
        raise QueryError(f"--source-ip must be an IP address, not {source_ip!r}")
    if not method or not method.isalpha():
        raise QueryError(f"--method must be a word such as GET or POST, not {method!r}")
    if sni is None and scheme in ("https", "tls") and address is None:
        sni = host_name(host)  # what curl and browsers send
    path = parts.path or "/"
    path = normalize_path(path) + (f"?{parts.query}" if parts.query else "")
    return Query(scheme=scheme, port=port, host=host_header or "", address=address,
                 path=path if scheme in ("http", "https") else "/", method=method.upper(),
                 headers=tuple(pairs), sni=sni.lower() if sni else None, source_ip=source_ip)


def normalize_path(path: str) -> str:
    """The path as the engine matches it: repeated slashes merged, ``.`` and ``..`` resolved."""
    trailing = path.endswith("/") and path != "/"
    out = posixpath.normpath("/" + path.lstrip("/"))
    out = "/" + out.lstrip("/")  # normpath keeps a leading "//"
    return out + "/" if trailing and out != "/" else out


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        return None
