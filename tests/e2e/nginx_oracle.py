"""The test oracle of ``podway migrate compare``: a real nginx configured as ingress-nginx would be.

``render`` writes the nginx.conf that ingress-nginx's template would give for the same Ingresses
(its semantics, learnt from its documentation and template; plain nginx, no Lua): one server per
host with the locations of every Ingress naming it, a default server answering 404, upstreams
from the EndpointSlices. What it reproduces:

- paths: ``Exact`` → ``location = P``; ``Prefix`` → ``location P/`` and ``location = P`` (whole
  segments); ``ImplementationSpecific`` → ``location P`` (a plain string prefix); when any
  Ingress of a host uses ``use-regex`` or ``rewrite-target``, *every* location of that host is
  ``location ~* "^P"`` (case-insensitive, anchored at the start only), longest path first;
- ``rewrite-target``: ``rewrite "(?i)P" TARGET break;`` (captures, query kept);
- ``ssl-redirect`` (default on for a host with a certificate) / ``force-ssl-redirect``: 308 to
  ``https://$host`` + the request URI without its trailing slash, no port (ingress-nginx's Lua
  ``redirect_to_https`` without ``use-port-in-redirects``);
- ``permanent-redirect`` / ``temporal-redirect`` (``return CODE URL``), ``app-root``
  (``if ($uri = /) return 302 $scheme://$http_host ROOT``), ``upstream-vhost`` (the ``Host``
  sent upstream), ``x-forwarded-prefix``;
- canary Ingresses: by header (``always``/``never``, or the exact ``canary-by-header-value``),
  then by cookie (``always``/``never``), then by weight (0 and 100 are exact; anything between
  is nginx ``split_clients`` on the request id, i.e. random, as ingress-nginx's is);
- HSTS on the HTTPS answers of a host with a certificate (ConfigMap ``hsts``,
  ``hsts-max-age``, ``hsts-include-subdomains``, ``hsts-preload``: ``Config.nginx``, by default
  ingress-nginx's ``max-age=31536000; includeSubDomains``), whatever the status, replacing the
  backend's own (ingress-nginx's Lua ``header()`` sets it; plain HTTP answers carry none).

It runs as one foreground process (``master_process off``) in a private folder, on loopback,
and dies with the test process.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from podway.base.children import die_with_parent
from podway.model import EndpointSlice, Ingress, Secret, Service
from podway.model.base import K8sObject
from podway.model.networking import IngressBackend
from podway.translate.core.nginx_config import NginxConfig
from podway.translate.ingress.nginx.annotations import Canary, NginxAnnotations, SSLRedirect, read
from tests.certs import GOOD_CERT, GOOD_KEY

from .local_servers import listening, stop


@dataclass(frozen=True, slots=True)
class Location:
    host: str
    path: str
    kind: str  # Exact, Prefix, ImplementationSpecific
    upstream: str  # "" : no endpoints (503)
    notes: NginxAnnotations
    canary: tuple[Canary, str] | None = None  # the canary's policy and upstream


@dataclass
class Config:
    """What ``render`` needs besides the objects."""

    folder: Path
    http_port: int
    https_port: int
    nginx: NginxConfig = field(default_factory=NginxConfig)  # the controller's ConfigMap (HSTS)
    upstreams: dict[str, list[str]] = field(default_factory=dict)


def _kind(objects: Sequence[K8sObject], cls: type) -> list:  # type: ignore[type-arg]
    return [o for o in objects if isinstance(o, cls)]


def _upstream(ns: str, backend: IngressBackend | None, objects: Sequence[K8sObject],
              config: Config) -> str:
    """The upstream name of a Service backend (declared in ``config.upstreams``); "" when the
    Service or its endpoints are missing."""
    if backend is None or backend.service is None:
        return ""
    svc = next((s for s in _kind(objects, Service)
                if s.metadata.namespace == ns and s.metadata.name == backend.service.name), None)
    if svc is None:
        return ""
    want = backend.service.port
    port = next((p for p in svc.spec.ports if (want.number is not None and p.port == want.number)
                 or (want.name is not None and p.name == want.name)), None)
    if port is None:
        return ""
    members: list[str] = []
    for eps in _kind(objects, EndpointSlice):
        if (eps.metadata.namespace != ns or eps.metadata.labels.get(
                "kubernetes.io/service-name") != svc.metadata.name):
            continue
        target = next((p.port for p in eps.ports if (p.name or "") == port.name), None)
        if target is None and len(eps.ports) == 1:
            target = eps.ports[0].port
        members.extend(f"{a}:{target}" for e in eps.endpoints for a in e.addresses
                       if target is not None and e.conditions.ready is not False)
    if not members:
        return ""
    name = f"{ns}-{svc.metadata.name}-{port.port}"
    config.upstreams[name] = members
    return name


def _locations(objects: Sequence[K8sObject], config: Config) -> dict[str, list[Location]]:
    ingresses = sorted(_kind(objects, Ingress), key=lambda i: (
        i.metadata.creation_timestamp is not None, i.metadata.creation_timestamp,
        i.metadata.namespace, i.metadata.name))
    servers: dict[str, list[Location]] = {}
    canaries: dict[tuple[str, str], tuple[Canary, str]] = {}
    for ing in ingresses:
        notes = read(ing.metadata.annotations, namespace=ing.metadata.namespace)
        for rule in ing.spec.rules:
            host = rule.host or "_"
            for p in rule.http.paths if rule.http else ():
                up = _upstream(ing.metadata.namespace, p.backend, objects, config)
                if notes.canary is not None:
                    canaries[(host, p.path)] = (notes.canary, up)
                    continue
                servers.setdefault(host, []).append(Location(
                    host=host, path=p.path, kind=p.path_type, upstream=up, notes=notes))
    for host, locations in servers.items():
        servers[host] = [Location(host=loc.host, path=loc.path, kind=loc.kind,
                                  upstream=loc.upstream, notes=loc.notes,
                                  canary=canaries.get((host, loc.path)))
                         for loc in locations]
    return servers


def _extra_names(objects: Sequence[K8sObject], servers: dict[str, list[Location]]
                 ) -> tuple[dict[str, list[str]], dict[str, str]]:
    """``server-alias`` (host → its aliases, never a name that is a server of its own) and
    ``from-to-www-redirect`` (the other name → the host it redirects to; not when that name
    is a server, an alias or already redirecting), oldest Ingress first, as ingress-nginx."""
    aliases: dict[str, list[str]] = {}
    taken: set[str] = set(servers)
    www: dict[str, str] = {}
    for ing in sorted(_kind(objects, Ingress), key=lambda i: (
            i.metadata.creation_timestamp is not None, i.metadata.creation_timestamp,
            i.metadata.namespace, i.metadata.name)):
        notes = read(ing.metadata.annotations, namespace=ing.metadata.namespace)
        hosts = [r.host for r in ing.spec.rules if r.host and r.host in servers]
        for alias in notes.server_alias:
            if hosts and alias not in taken:
                aliases.setdefault(hosts[0], []).append(alias)
                taken.add(alias)
        for host in hosts if notes.from_to_www else ():
            other = host[4:] if host.startswith("www.") else f"www.{host}"
            if other not in taken and not host.startswith("*."):
                www[other] = host
                taken.add(other)
    return aliases, www


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _location_body(loc: Location, index: int, https_server: bool, maps: list[str]
                   ) -> list[str]:
    n = loc.notes
    out: list[str] = []
    if n.redirect is not None:
        return [f"return {n.redirect.code} {_q(n.redirect.url)};"]
    ssl = n.ssl or _DEFAULT_SSL
    # ingress-nginx redirects when the *server* has a certificate for the host, whichever
    # Ingress brought it
    if (ssl.redirect and https_server) or ssl.force:
        out += ["if ($scheme = http) {",
                "    return 308 https://$host$podway_no_trailing_slash;", "}"]
    if n.rewrite is not None and n.rewrite.target is not None:
        out.append(f"rewrite {_q('(?i)' + loc.path)} {_q(n.rewrite.target)} break;")
    out.append(f"proxy_set_header Host {_q(n.upstream_vhost) if n.upstream_vhost else '$host'};")
    out += ["proxy_set_header X-Real-IP $remote_addr;",
            "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
            "proxy_set_header X-Forwarded-Proto $scheme;",
            "proxy_set_header X-Forwarded-Host $host;"]
    if n.x_forwarded_prefix:
        out.append(f"proxy_set_header X-Forwarded-Prefix {_q(n.x_forwarded_prefix)};")
    target = loc.upstream
    if loc.canary is not None:
        target = _canary_map(loc, index, maps)
    if not target:
        out.append("return 503;")
    else:
        out.append(f"proxy_pass http://{target};")
    return out


def _canary_map(loc: Location, index: int, maps: list[str]) -> str:
    """Variables choosing the canary's upstream or the main one, ingress-nginx's precedence."""
    assert loc.canary is not None
    policy, canary_up = loc.canary
    main, canary = loc.upstream or "podway_none", canary_up or "podway_none"
    var = f"$podway_canary_{index}"
    header = cookie = '""'
    if policy.by_header:
        name = "$http_" + policy.by_header.lower().replace("-", "_")
        if policy.header_value is not None:
            maps.append(f"map {name} {var}_h {{ {_q(policy.header_value)} {canary}; "
                        "default \"\"; }")
        else:
            maps.append(f"map {name} {var}_h {{ always {canary}; never {main}; default \"\"; }}")
        header = f"{var}_h"
    if policy.by_cookie:
        name = "$cookie_" + policy.by_cookie.replace("-", "_")
        maps.append(f"map {name} {var}_c {{ always {canary}; never {main}; default \"\"; }}")
        cookie = f"{var}_c"
    share = policy.weight * 100 // max(policy.weight_total, 1)
    if share <= 0:
        weighted = main
    elif share >= 100:
        weighted = canary
    else:
        maps.append(f"split_clients $request_id {var}_w {{ {share}% {canary}; * {main}; }}")
        weighted = f"{var}_w"
    maps.append(f'map "{header.strip(chr(34))}|{cookie.strip(chr(34))}" {var} {{ '
                f'"~^(?<h>[^|]+)\\|" $h; "~^\\|(?<c>.+)$" $c; default {weighted}; }}')
    return var


_DEFAULT_SSL = SSLRedirect()  # ssl-redirect on, force off


def _match(loc: Location, regex: bool) -> list[str]:
    if regex:
        return [f"~* {_q('^' + loc.path)}"]
    if loc.kind == "Exact":
        return [f"= {loc.path}"]
    if loc.kind == "Prefix" and loc.path.rstrip("/"):
        bare = loc.path.rstrip("/")
        return [f"{bare}/", f"= {bare}"]
    return [loc.path if loc.kind != "Prefix" else "/"]


def render(objects: Sequence[K8sObject], config: Config) -> str:
    """nginx.conf for ``objects``; certificate files are written to ``config.folder``."""
    servers = _locations(objects, config)
    secrets = {(s.metadata.namespace, s.metadata.name) for s in _kind(objects, Secret)}
    tls_of: dict[str, bool] = {}
    for ing in _kind(objects, Ingress):
        for t in ing.spec.tls:
            ok = (ing.metadata.namespace, t.secret_name or "") in secrets
            for h in t.hosts:
                tls_of[h] = tls_of.get(h, False) or ok
    for host, names in _extra_names(objects, servers)[0].items():
        for alias in names:  # an alias is a name of the host's server: its certificate too
            tls_of[alias] = tls_of.get(host, False)
    cert, key = config.folder / "tls.crt", config.folder / "tls.key"
    cert.write_text(GOOD_CERT)
    key.write_text(GOOD_KEY)
    listen = [f"listen 127.0.0.1:{config.http_port}",
              f"listen 127.0.0.1:{config.https_port} ssl"]
    maps: list[str] = []
    blocks: list[str] = []
    index = 0
    aliases, www = _extra_names(objects, servers)
    for host, locations in servers.items():
        https = tls_of.get(host, False)
        regex = any(loc.notes.rewrite is not None and loc.notes.rewrite.regex_paths
                    for loc in locations)
        names = " ".join([host, *aliases.get(host, ())])
        lines = [f"server {{ server_name {names};", f"  {listen[0]};"]
        if https:
            lines += [f"  {listen[1]};", f"  ssl_certificate {cert};",
                      f"  ssl_certificate_key {key};"]
            if config.nginx.hsts_value is not None:
                # on HTTPS answers only, as ingress-nginx's Lua header() (an empty value adds
                # no header: the HTTP redirect carries none); the backend's own is replaced
                lines += ["  proxy_hide_header Strict-Transport-Security;",
                          "  add_header Strict-Transport-Security $podway_hsts always;"]
        app_root = next((loc.notes.app_root for loc in locations if loc.notes.app_root), None)
        if app_root:
            lines += ["  if ($uri = /) {", f"    return 302 $scheme://$http_host{app_root};",
                      "  }"]
        ordered = sorted(locations, key=lambda loc: -len(loc.path)) if regex else locations
        seen: set[str] = set()
        for loc in ordered:
            index += 1
            for match in _match(loc, regex):
                if match in seen:
                    continue
                seen.add(match)
                body = _location_body(loc, index, https, maps)
                lines.append(f"  location {match} {{")
                lines += [f"    {b}" for b in body]
                lines.append("  }")
        if "/" not in seen and not regex:
            lines.append("  location / { return 404; }")
        lines.append("}")
        blocks.append("\n".join(lines))
    for other, host in www.items():
        # ingress-nginx's redirect server: no locations, so no Lua header phase (no HSTS)
        lines = [f"server {{ server_name {other};", f"  {listen[0]};"]
        if tls_of.get(host, False):
            lines += [f"  {listen[1]};", f"  ssl_certificate {cert};",
                      f"  ssl_certificate_key {key};"]
        lines += ["  return 308 $scheme://" + host + "$podway_no_trailing_slash;", "}"]
        blocks.append("\n".join(lines))
    upstreams = [f"upstream {name} {{ " + " ".join(f"server {m};" for m in members) + " }"
                 for name, members in config.upstreams.items()]
    upstreams.append("upstream podway_none { server 127.0.0.1:1 down; }")
    folder = config.folder
    return "\n".join([
        "daemon off;", "master_process off;", f"pid {folder}/nginx.pid;",
        f"error_log {folder}/error.log warn;", "events { worker_connections 512; }", "http {",
        "access_log off;", f"client_body_temp_path {folder}/body;",
        f"proxy_temp_path {folder}/proxy;", f"fastcgi_temp_path {folder}/fastcgi;",
        f"uwsgi_temp_path {folder}/uwsgi;", f"scgi_temp_path {folder}/scgi;",
        "proxy_http_version 1.1;", "server_names_hash_bucket_size 128;",
        'map $request_uri $podway_no_trailing_slash { "~^(?<p>.*)/$" $p; default $request_uri; }',
        f'map $scheme $podway_hsts {{ https "{config.nginx.hsts_value or ""}"; default ""; }}',
        *maps, *upstreams,
        "server {", f"  {listen[0]} default_server;", f"  {listen[1]} default_server;",
        f"  ssl_certificate {cert};", f"  ssl_certificate_key {key};",
        "  server_name _;", "  location / { return 404; }", "}",
        *blocks, "}", ""])


@contextlib.asynccontextmanager
async def nginx(objects: Sequence[K8sObject], config: Config) -> AsyncIterator[str]:
    """Run nginx on ``objects`` until the block ends; yields the configuration text."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    text = render(objects, config)
    conf = config.folder / "nginx.conf"
    conf.write_text(text)
    check = await asyncio.create_subprocess_exec(
        binary, "-t", "-q", "-p", str(config.folder), "-c", str(conf),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await check.communicate()
    assert check.returncode == 0, err.decode() + "\n" + text
    proc = await asyncio.create_subprocess_exec(
        binary, "-p", str(config.folder), "-c", str(conf),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        preexec_fn=die_with_parent())  # a test process killed hard takes nginx with it
    try:
        await listening(config.http_port, proc, config.folder / "error.log")
        yield text
    finally:
        await stop(proc)
