"""Send probes to one entry point and record what a client would notice (the only I/O of compare).

An ``EntryPoint`` is where one side listens: an ``http://`` and/or an ``https://`` address. Every
probe goes to the address of its scheme with its own ``Host`` header and, over HTTPS, its host as
SNI; certificates are not verified (compare checks routing, not trust). Redirects are never
followed: a redirect is an answer to compare. Each probe uses a fresh connection, so no
connection state (a keep-alive pinned to one SNI, a canary cookie) leaks from one probe to the
next.

An ``Answer`` keeps only what a client or a backend can tell apart, normalised so that two
correct entry points on different addresses compare equal:

- ``backend``: who answered — the ``--backend-header`` value when one is named, else the echo
  server's ``name`` (``podway echo`` answers JSON naming itself), else empty (the proxy answered
  by itself: a 404, a redirect);
- ``upstream_path``, ``upstream_host`` and the ``upstream_headers`` asked for: what the backend
  saw (echo only) — how rewrites, ``upstream-vhost`` and ``x-forwarded-prefix`` show;
- ``location``: the redirect target, with the entry point's own port left out (an old side on
  ``:8443`` and a new one on ``:9443`` redirect "to themselves" alike) and an empty path read
  as ``/`` (the same URL);
- ``headers``: response headers except those every proxy sets its own way (``IGNORED``);
  a ``Set-Cookie`` keeps its name and attributes, not its value or ``Expires``
  (``cookie_shape``).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from yarl import URL

from podway.base.errors import ConfigError
from podway.tools.migrate.probes import Probe

# Set by each proxy its own way, or by the transfer itself: never a migration difference.
IGNORED = frozenset({
    "date", "server", "content-length", "content-type", "connection", "keep-alive",
    "transfer-encoding", "x-request-id", "etag", "last-modified", "accept-ranges",
    "x-envoy-upstream-service-time", "proxy-connection",
})
IGNORED_PREFIXES = ("x-envoy-",)
DEFAULT_UPSTREAM_HEADERS = ("x-forwarded-prefix", "x-forwarded-proto")
_BODY_LIMIT = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Address:
    host: str
    port: int

    @property
    def netloc(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryPoint:
    """Where one side listens: an address per scheme (either may be missing)."""

    name: str
    http: Address | None = None
    https: Address | None = None

    @classmethod
    def parse(cls, name: str, urls: Sequence[str]) -> EntryPoint:
        """``--old``/``--new`` values: one ``http://HOST[:PORT]`` and/or one ``https://…``."""
        found: dict[str, Address] = {}
        for text in urls:
            try:
                url = urlsplit(text)
                port = url.port
            except ValueError:
                raise ConfigError(f"--{name} {text!r} is not a URL") from None
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ConfigError(f"--{name} {text!r} must be http://HOST[:PORT] or "
                                  "https://HOST[:PORT]")
            if url.path not in ("", "/") or url.query:
                raise ConfigError(f"--{name} {text!r}: give the entry point only (no path); "
                                  "paths come from the request set")
            if url.scheme in found:
                raise ConfigError(f"--{name} is given twice for {url.scheme}://")
            found[url.scheme] = Address(host=url.hostname,
                                        port=port or (443 if url.scheme == "https" else 80))
        return cls(name=name, http=found.get("http"), https=found.get("https"))

    def address(self, scheme: str) -> Address | None:
        return self.https if scheme == "https" else self.http


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """What one side answered to one probe (``status`` None: no answer, ``error`` says why)."""

    status: int | None = None
    error: str = ""
    backend: str = ""
    upstream_path: str = ""
    upstream_host: str = ""
    location: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    upstream_headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayOptions:
    backend_header: str = ""  # response header naming the backend (default: the echo's body)
    upstream_headers: tuple[str, ...] = DEFAULT_UPSTREAM_HEADERS  # echo-seen request headers
    ignore_headers: frozenset[str] = field(default_factory=frozenset)  # besides IGNORED
    timeout_s: float = 10.0
    concurrency: int = 8


def normalise_location(location: str, entry: EntryPoint) -> str:
    """``location`` with the entry point's own ports left out and an empty path read as ``/``."""
    if not location:
        return ""
    try:
        url = urlsplit(location)
        port = url.port
    except ValueError:
        return location
    if not url.scheme or not url.hostname:
        return location  # relative: nothing names the entry point
    own = entry.address(url.scheme)
    default = 443 if url.scheme == "https" else 80
    host = url.hostname if ":" not in url.hostname else f"[{url.hostname}]"
    netloc = host if port in (None, default) or (own and port == own.port) else f"{host}:{port}"
    return urlunsplit((url.scheme, netloc, url.path or "/", url.query, url.fragment))


def read_answer(*, status: int, headers: Sequence[tuple[str, str]], body: bytes,
                entry: EntryPoint, opts: ReplayOptions) -> Answer:
    """The comparable parts of one response (pure: what ``send`` records)."""
    names = {k.lower() for k, _ in headers}
    skip = IGNORED | opts.ignore_headers | {opts.backend_header.lower(), "location"}
    kept: dict[str, list[str]] = {}
    for key, value in headers:
        k = key.lower()
        if k in skip or k.startswith(IGNORED_PREFIXES):
            continue
        kept.setdefault(k, []).append(cookie_shape(value) if k == "set-cookie" else value)
    location = next((v for k, v in headers if k.lower() == "location"), "")
    echo = _echo(body)
    backend = ""
    if opts.backend_header and opts.backend_header.lower() in names:
        backend = next(v for k, v in headers if k.lower() == opts.backend_header.lower())
    elif echo is not None and isinstance(echo.get("name"), str):
        backend = echo["name"]
    seen: dict[str, Any] = echo.get("headers", {}) if echo is not None else {}
    upstream = tuple((h, str(seen[h])) for h in opts.upstream_headers
                     if isinstance(seen, dict) and h in seen)
    return Answer(status=status, backend=backend,
                  upstream_path=str(echo.get("path", "")) if echo is not None else "",
                  upstream_host=str(echo.get("host", "")) if echo is not None else "",
                  location=normalise_location(location, entry),
                  headers=tuple(sorted((k, ", ".join(v)) for k, v in kept.items())),
                  upstream_headers=upstream)


def cookie_shape(value: str) -> str:
    """A ``Set-Cookie`` without what differs by design between two proxies that agree: the
    value (an affinity cookie names a backend its own way) and ``Expires`` (a date). Name and
    attributes stay: a cookie missing, renamed or scoped to another path is a difference."""
    name, _, rest = value.partition(";")
    attrs = sorted(a.strip().lower() for a in rest.split(";")
                   if a.strip() and not a.strip().lower().startswith("expires="))
    return "; ".join([f"{name.split('=', 1)[0].strip()}=…", *attrs])


def _echo(body: bytes) -> dict[str, Any] | None:
    """The echo server's JSON description of the request, if that is what the body is."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if isinstance(data, dict) and "name" in data and "path" in data:
        return data
    return None


def _tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Replayer:
    """Sends probes to entry points over one client session (``async with``)."""

    def __init__(self, opts: ReplayOptions) -> None:
        self.opts = opts
        self._tls = _tls_context()
        self._limit = asyncio.Semaphore(max(1, opts.concurrency))
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Replayer:
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=self.opts.timeout_s))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def send(self, entry: EntryPoint, probe: Probe) -> Answer:
        address = entry.address(probe.scheme)
        if address is None:
            return Answer(error=f"no {probe.scheme}:// entry point given for --{entry.name}")
        assert self._session is not None, "use Replayer in `async with`"
        url = URL(f"{probe.scheme}://{address.netloc}{probe.path}", encoded=True)
        headers = {"Host": probe.host, **dict(probe.headers)}
        async with self._limit:
            try:
                async with self._session.request(
                        probe.method, url, headers=headers, allow_redirects=False,
                        ssl=self._tls if probe.scheme == "https" else False,
                        server_hostname=probe.host if probe.scheme == "https" else None,
                ) as response:
                    body = await response.content.read(_BODY_LIMIT)
                    return read_answer(status=response.status,
                                       headers=list(response.headers.items()), body=body,
                                       entry=entry, opts=self.opts)
            except TimeoutError:
                return Answer(error=f"no answer within {self.opts.timeout_s:g} s")
            except (aiohttp.ClientError, OSError) as error:
                return Answer(error=_reason(error))


def _reason(error: BaseException) -> str:
    """A stable, address-free reason (the two sides' addresses differ by design)."""
    kinds: tuple[tuple[type[BaseException], str], ...] = (
        (aiohttp.ClientSSLError, "TLS handshake failed"),
        (aiohttp.ClientConnectorError, "connection refused or unreachable"),
        (aiohttp.ServerDisconnectedError, "connection closed without an answer"),
        (aiohttp.ClientPayloadError, "answer cut short"),
    )
    for kind, text in kinds:
        if isinstance(error, kind):
            return text
    return type(error).__name__

