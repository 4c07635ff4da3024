"""Data-plane benchmark: what a request costs the load balancer, Podway's Envoy beside its peers.

The same load (``wrk``, one thread, a tiny answer from an nginx upstream with one worker) goes
in interleaved rounds through each *target* on loopback:

* ``nginx-direct``  the upstream itself (no load balancer: the floor);
* ``envoy-static``  a hand-written Envoy, one route, no xDS (the yardstick);
* ``podway``        ``podway run`` on manifests for the same route (Podway's Envoy);
* ``haproxy``       HAProxy as reverse proxy, one thread (hand-written);
* ``podway-haproxy`` ``podway run --engine haproxy`` on the same manifests (the HAProxy engine
  as Podway configures it, one thread; its CPU is the HAProxy processes');
* ``nginx-proxy``   nginx as reverse proxy, one worker, upstream keep-alive.

Every Envoy runs one worker (``--concurrency 1``). Workloads: HTTP/1.1 keep-alive, a new
connection per request (``Connection: close``), HTTPS keep-alive, and a new TLS handshake per
request. For each (target, workload) it prints the requests per second and the requests per
CPU-second of the load balancer's *own* processes (utime + stime from ``/proc/PID/stat`` of
the process and its descendants, read before and after each run; for ``podway`` Envoy only,
the Python control plane's CPU is printed beside it), the median over rounds, and the ratio
to ``envoy-static``: per round (the two ran back to back), then the median over rounds. The
machine is shared: the load average is printed, rounds are interleaved (targets in a new order
each round), and only figures of one run compare. ``--variants`` adds static Envoys with
Podway's optional filters enabled or disabled, and static Envoys configured as Podway configures
the route with each former default switched back on or each current setting off (what each
costs: docs/performance.md), plus three to read the others by: ``envoy-static-twin`` (a second,
identical static Envoy: the run's noise floor), ``podway-replica`` (Podway's configuration read
back from its Envoy's ``/config_dump`` and served from a file: what xDS delivery costs) and
``envoy-edge`` (the static Envoy with the settings Envoy's own edge-proxy guide asks for; when
it runs, each row also has ``x edge``, its ratio to it, beside ``x static``).
``haproxy-tls-other`` is ``haproxy-tls`` (the hand-written HAProxy with Podway's TLS lines) run
by another HAProxy build (``PODWAY_BENCH_OTHER_HAPROXY``, ``bench/debian_haproxy.py``).
``--replica-variants no-retries,no-client-address`` adds ``podway-replica`` with one setting
taken out (``dataplane_instructions.VARIANTS``; ``A+B`` both): per CPU-second what
``dataplane_instructions.py --variants`` counts in instructions.

Adding a target is one function decorated ``@target("name")`` that starts it and returns a
``Running`` (its ports, the PIDs whose CPU counts, how to stop it).

    python bench/dataplane.py [--rounds 3] [--duration 2] [--targets a,b] [--json]

Default total: about 2.5 minutes (6 targets x 4 workloads x 3 rounds x 2 s, plus start-up).
It kills only the processes it started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haproxy_instructions import OTHER_HAPROXY, haproxy_command, haproxy_version
from speedref import measure, static_envoy

from podway.envoy.engine.bootstrap import INLINE_REQUEST_HEADERS
from podway.envoy.engine.process import find_envoy
from podway.haproxy.tls import TLS13_SUITES

WORKLOADS = ("http-keepalive", "http-newconn", "https-keepalive", "https-newconn")
CONNECTIONS = 16  # wrk's connections (one thread)
BODY = "ok\n"
_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --- processes and their CPU ---------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    kids = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` (each process's threads included), in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone: its time is lost, which only lowers the figure
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / _TICK


@dataclass
class Running:
    """A started target: its ports, whose CPU counts, and how to stop it."""

    http_port: int
    https_port: int
    lb_pids: Callable[[], list[int]]
    stop: Callable[[], None]
    side_pids: Callable[[], list[int]] = list  # the control plane's, if any


@dataclass
class Context:
    """What every target gets: a private folder, the upstream's ports, a certificate."""

    root: Path
    upstream_http: int
    upstream_https: int
    cert: Path
    key: Path
    envoy: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, args: list[str], *, log: str) -> subprocess.Popen[bytes]:
        out = (self.root / log).open("wb")
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc


def stop_process(proc: subprocess.Popen[bytes], *, grace_s: float = 10) -> None:
    """SIGTERM to the process we started (its group: nginx's and HAProxy's workers), then
    SIGKILL after ``grace_s``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _plain(proc: subprocess.Popen[bytes], http: int, https: int) -> Running:
    return Running(http, https, lambda: tree(proc.pid), lambda: stop_process(proc))


TARGETS: dict[str, Callable[[Context], Running]] = {}
VARIANTS: dict[str, Callable[[Context], Running]] = {}


def target(name: str, *, variant: bool = False
           ) -> Callable[[Callable[[Context], Running]], Callable[[Context], Running]]:
    """Register a target: a function that starts it and returns its ``Running``."""
    def register(fn: Callable[[Context], Running]) -> Callable[[Context], Running]:
        (VARIANTS if variant else TARGETS)[name] = fn
        return fn
    return register


# --- nginx -------------------------------------------------------------------------------------
def _nginx_conf(ctx: Context, name: str, server: str) -> Path:
    folder = ctx.root / name
    folder.mkdir()
    temps = "\n".join(f"  {k}_temp_path {folder}/{k};" for k in
                      ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = folder / "nginx.conf"
    conf.write_text(f"""worker_processes 1;
daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
{temps}
  ssl_certificate {ctx.cert};
  ssl_certificate_key {ctx.key};
{server}
}}
""")
    return conf


def start_upstream(ctx: Context) -> subprocess.Popen[bytes]:
    server = f"""  server {{
    listen 127.0.0.1:{ctx.upstream_http};
    listen 127.0.0.1:{ctx.upstream_https} ssl;
    location / {{ default_type text/plain; return 200 "{BODY.strip()}\\n"; }}
  }}"""
    conf = _nginx_conf(ctx, "upstream", server)
    return ctx.spawn(["nginx", "-p", str(conf.parent), "-e", str(conf.parent / "error.log"),
                      "-c", str(conf)], log="upstream.log")


@target("nginx-direct")
def nginx_direct(ctx: Context) -> Running:
    """No load balancer: the upstream's own figures (its CPU counts)."""
    proc = ctx.procs[0]  # started first (``started``)
    return Running(ctx.upstream_http, ctx.upstream_https, lambda: tree(proc.pid),
                   lambda: None)


@target("nginx-proxy")
def nginx_proxy(ctx: Context) -> Running:
    http, https = free_port(), free_port()
    server = f"""  upstream up {{ server 127.0.0.1:{ctx.upstream_http}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{http};
    listen 127.0.0.1:{https} ssl;
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}"""
    conf = _nginx_conf(ctx, "nginx-proxy", server)
    proc = ctx.spawn(["nginx", "-p", str(conf.parent), "-e", str(conf.parent / "error.log"),
                      "-c", str(conf)], log="nginx-proxy.log")
    return _plain(proc, http, https)


# --- HAProxy -----------------------------------------------------------------------------------
#: The TLS lines Podway renders (``podway.haproxy.render``): AES-128-GCM first, no tickets.
HAPROXY_TLS = (f"  ssl-default-bind-ciphersuites {TLS13_SUITES}\n"
               "  ssl-default-bind-options no-tls-tickets\n")


@target("haproxy")
def haproxy(ctx: Context) -> Running:
    """A hand-written HAProxy, OpenSSL's defaults for TLS."""
    return _haproxy(ctx, "haproxy", "")


@target("haproxy-tls", variant=True)
def haproxy_tls(ctx: Context) -> Running:
    """The hand-written HAProxy with the TLS settings Podway renders (TLS 1.3 suites with
    AES-128-GCM first, no session tickets): the same file plus those two lines."""
    return _haproxy(ctx, "haproxy-tls", HAPROXY_TLS)


@target("haproxy-tls-other", variant=True)
def haproxy_tls_other(ctx: Context) -> Running:
    """``haproxy-tls`` run by another HAProxy build, the one ``PODWAY_BENCH_OTHER_HAPROXY``
    names (``bench/debian_haproxy.py``: Debian 13's HAProxy 3.0 with OpenSSL 3.5)."""
    return _haproxy(ctx, "haproxy-tls-other", HAPROXY_TLS, other=True)


def haproxy_config(extra: str, binds: str, upstream: int) -> str:
    """The hand-written HAProxy file: one thread, ``extra`` global lines, the frontend's
    ``binds`` lines, every request to the upstream on ``upstream``."""
    return f"""global
  nbthread 1
  maxconn 4096
{extra}defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend fe
{binds}  default_backend be
backend be
  server up 127.0.0.1:{upstream}
"""


def _haproxy(ctx: Context, name: str, extra: str, *, other: bool = False) -> Running:
    http, https = free_port(), free_port()
    pem = ctx.root / f"{name}.pem"
    pem.write_text(ctx.cert.read_text() + ctx.key.read_text())
    conf = ctx.root / f"{name}.cfg"
    conf.write_text(haproxy_config(extra, f"  bind 127.0.0.1:{http}\n"
                                          f"  bind 127.0.0.1:{https} ssl crt {pem}\n",
                                   ctx.upstream_http))
    proc = ctx.spawn([*haproxy_command(other=other), "-db", "-f", str(conf)],
                     log=f"{name}.log")
    return _plain(proc, http, https)


# --- Envoy -------------------------------------------------------------------------------------
def _static_bootstrap(ctx: Context, http: int, https: int,
                      filters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``speedref.static_envoy`` (one route), plus the same manager behind TLS on ``https``;
    ``filters`` go before the router."""
    config = static_envoy(http, ctx.upstream_http)
    (listener,) = config["static_resources"]["listeners"]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    if filters:
        manager["http_filters"][:0] = filters
    tls = {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
                 "DownstreamTlsContext",
        "common_tls_context": {"alpn_protocols": ["h2", "http/1.1"], "tls_certificates": [{
            "certificate_chain": {"filename": str(ctx.cert)},
            "private_key": {"filename": str(ctx.key)}}]}}}
    secure = json.loads(json.dumps(listener))
    secure["name"] = "static-tls"
    secure["address"]["socket_address"]["port_value"] = https
    secure["filter_chains"][0]["transport_socket"] = tls
    config["static_resources"]["listeners"].append(secure)
    return config


def _envoy(ctx: Context, name: str, config: dict[str, Any]) -> subprocess.Popen[bytes]:
    path = ctx.root / f"{name}.json"
    path.write_text(json.dumps(config))
    return ctx.spawn([str(ctx.envoy), "-c", str(path), "--concurrency", "1",
                      "--disable-hot-restart", "-l", "error"], log=f"{name}.log")


@target("envoy-static")
def envoy_static(ctx: Context) -> Running:
    http, https = free_port(), free_port()
    return _plain(_envoy(ctx, "envoy-static", _static_bootstrap(ctx, http, https)), http, https)


@target("envoy-static-twin", variant=True)
def envoy_static_twin(ctx: Context) -> Running:
    """A second, identical ``envoy-static``: its ratio to the first is the run's noise floor
    (the same configuration, only another process and another place in the order)."""
    http, https = free_port(), free_port()
    config = _static_bootstrap(ctx, http, https)
    return _plain(_envoy(ctx, "envoy-static-twin", config), http, https)


def edge_settings(config: dict[str, Any]) -> None:
    """Envoy's own guide for an edge proxy ("Configuring Envoy as an edge proxy", Envoy's
    best-practices docs) applied to a static bootstrap: the client address from the
    connection (``use_remote_address``: the client's X-Forwarded-For and ``x-envoy-*``
    headers not trusted), path normalisation (``normalize_path``, ``merge_slashes``), names
    with underscores refused, 32 KiB buffer limits, stream, request and idle timeouts, HTTP/2
    stream and window limits, a global downstream connection limit. Nothing else: no
    retries, no host-port stripping, no checks (those are Podway's own)."""
    for listener in config["static_resources"]["listeners"]:
        listener["per_connection_buffer_limit_bytes"] = 32768
        for chain in listener["filter_chains"]:
            manager = chain["filters"][0]["typed_config"]
            manager.update({
                "use_remote_address": True, "normalize_path": True, "merge_slashes": True,
                "path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
                "stream_idle_timeout": "300s", "request_timeout": "300s",
                "common_http_protocol_options": {
                    "idle_timeout": "3600s", "headers_with_underscores_action": "REJECT_REQUEST"},
                "http2_protocol_options": {
                    "max_concurrent_streams": 100, "initial_stream_window_size": 65536,
                    "initial_connection_window_size": 1048576}})
    for cluster in config["static_resources"]["clusters"]:
        cluster["per_connection_buffer_limit_bytes"] = 32768
    config["overload_manager"] = {"resource_monitors": [{
        "name": "envoy.resource_monitors.global_downstream_max_connections",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.resource_monitors."
                     "downstream_connections.v3.DownstreamConnectionsConfig",
            "max_active_downstream_connections": 50000}}]}


@target("envoy-edge", variant=True)
def envoy_edge(ctx: Context) -> Running:
    """``envoy-static`` with the settings Envoy's docs ask of every edge proxy
    (``edge_settings``): a second yardstick, printed beside the first (``x edge``), never
    instead of it."""
    http, https = free_port(), free_port()
    config = _static_bootstrap(ctx, http, https)
    edge_settings(config)
    return _plain(_envoy(ctx, "envoy-edge", config), http, https)


def _optional_filters(*, disabled: bool, auth: bool = False) -> list[dict[str, Any]]:
    """Podway's optional HTTP filters as its managers carry them (``envoy/config/access``);
    ``auth``: with edge auth's four."""
    kinds: list[tuple[str, str, dict[str, Any]]] = [
        ("envoy.filters.http.cors", "cors.v3.Cors", {}),
        ("envoy.filters.http.local_ratelimit", "local_ratelimit.v3.LocalRateLimit",
         {"stat_prefix": "http_local_rate_limit"}),
        ("envoy.filters.http.rbac", "rbac.v3.RBAC", {})]
    if auth:  # edge auth's four (issue 28), never enabled on a manager
        kinds += [
            ("podway.rbac.authorization", "rbac.v3.RBAC", {}),
            ("envoy.filters.http.basic_auth", "basic_auth.v3.BasicAuth", {"users": {
                "inline_string": "podway-nobody:{SHA}AAAAAAAAAAAAAAAAAAAAAAAAAAA="}}),
            ("podway.ext_authz.http", "ext_authz.v3.ExtAuthz", {
                "transport_api_version": "V3", "http_service": {"server_uri": {
                    "uri": "http://podway-no-auth-server", "cluster": "podway-no-auth-server",
                    "timeout": "1s"}}}),
            ("podway.ext_authz.grpc", "ext_authz.v3.ExtAuthz", {
                "transport_api_version": "V3", "grpc_service": {"envoy_grpc": {
                    "cluster_name": "podway-no-auth-server"}}})]
    kinds += [("envoy.filters.http.buffer", "buffer.v3.Buffer", {"max_request_bytes": 1}),
              ("envoy.filters.http.lua", "lua.v3.Lua", {})]
    # Podway never had these enabled on a manager: only the first three were ever on.
    switchable = ("envoy.filters.http.cors", "envoy.filters.http.local_ratelimit",
                  "envoy.filters.http.rbac")
    return [{"name": name, "disabled": disabled or name not in switchable, "typed_config": {
        "@type": f"type.googleapis.com/envoy.extensions.filters.http.{kind}", **extra}}
        for name, kind, extra in kinds]


@target("envoy-filters-on", variant=True)
def envoy_filters_on(ctx: Context) -> Running:
    """The static Envoy with CORS, rate limit and RBAC enabled (idle) on the manager: what
    Podway carried before (buffer was already disabled)."""
    http, https = free_port(), free_port()
    config = _static_bootstrap(ctx, http, https, _optional_filters(disabled=False))
    return _plain(_envoy(ctx, "envoy-filters-on", config), http, https)


@target("envoy-filters-off", variant=True)
def envoy_filters_off(ctx: Context) -> Running:
    """The static Envoy with the same filters present but ``disabled`` (Podway now)."""
    http, https = free_port(), free_port()
    config = _static_bootstrap(ctx, http, https, _optional_filters(disabled=True))
    return _plain(_envoy(ctx, "envoy-filters-off", config), http, https)


def _podway_like(ctx: Context, name: str, **options: Any) -> Running:
    """Start ``podway_like_config(**options)``."""
    http, https = free_port(), free_port()
    return _plain(_envoy(ctx, name, podway_like_config(ctx, http, https, **options)),
                  http, https)


def podway_like_config(ctx: Context, http: int, https: int, *, filters_on: bool = False,
                       budget: bool = False, real_ip: bool = False, retries: bool = True,
                       checks: bool = True, manager: bool = True, drop_real_ip: bool = True,
                       lua: bool = True, lifetime_s: float | None = None, auth: bool = True,
                       optional: bool = True, extra_disabled: int = 0) -> dict[str, Any]:
    """A static Envoy configured as Podway configures one route (its manager's settings, the
    host's connect-failure retries, the cluster's checks), with the defaults Podway had before
    issue 24 switched on one by one: the optional filters enabled, a retry budget instead of
    ``max_retries``, the X-Real-IP formatter; or one of today's settings switched off
    (``retries``, ``checks``: active check and outlier detection, ``manager``: path
    normalisation and the client address, ``drop_real_ip``, ``lua``: the disabled Lua filter
    of streamed body limits on every manager); ``lifetime_s``: the connections to members
    drained after that long (nodeport mode's 1 s); ``auth``: edge auth's four disabled filters
    (issue 28); ``optional``: any disabled optional filter at all; ``extra_disabled``: that
    many more disabled filters (a cost too small to see for a few, multiplied). What each
    costs: its ratio to ``envoy-podway-now`` (docs/performance.md, "What each default
    costs"). As Podway's bootstrap and routers: X-Real-IP has a slot of its own
    (``inline_headers``) and the router makes no per-pool dynamic stats (before 2026-12-05
    15:55 these variants lacked both, 3.7k and 8.8k instructions a request that Podway's
    Envoy no longer spends: they measured below Podway's own Envoy)."""
    filters = [f for f in _optional_filters(disabled=not filters_on, auth=auth)
               if (lua or not f["name"].endswith("lua")) and optional]
    filters += [{"name": f"extra.rbac.{i}", "disabled": True, "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"}}
        for i in range(extra_disabled)]
    config = _static_bootstrap(ctx, http, https, filters)
    config["inline_headers"] = [{"inline_header_name": name, "inline_header_type":
                                 "REQUEST_HEADER"} for name in INLINE_REQUEST_HEADERS]
    for listener in config["static_resources"]["listeners"]:
        hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
        hcm["http_filters"][-1]["typed_config"]["dynamic_stats"] = False  # the router
        if manager:
            hcm.update({"use_remote_address": True, "normalize_path": True,
                        "merge_slashes": True, "strip_any_host_port": True,
                        "strip_trailing_host_dot": True, "upgrade_configs": [
                            {"upgrade_type": "websocket", "enabled": False}]})
        table = hcm["route_config"]
        (host,) = table["virtual_hosts"]
        host["retry_policy"] = {
            "retry_on": "reset-before-request,connect-failure,refused-stream",
            "num_retries": 2, "host_selection_retry_max_attempts": 3,
            "retry_host_predicate": [{
                "name": "envoy.retry_host_predicates.previous_hosts", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts."
                             "v3.PreviousHostsPredicate"}}]}
        if not retries:
            del host["retry_policy"]
        host["routes"][0]["route"]["upgrade_configs"] = [{"upgrade_type": "websocket"}]
        if real_ip:
            table["request_headers_to_add"] = [{"header": {
                "key": "x-real-ip", "value": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"},
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]
        elif drop_real_ip:
            table["request_headers_to_remove"] = ["x-real-ip"]
    (cluster,) = config["static_resources"]["clusters"]
    cluster.update({
        "connect_timeout": "5s", "ignore_health_on_host_removal": True,
        "common_lb_config": {"healthy_panic_threshold": {}, "update_merge_window": "0s"},
        "health_checks": [{"timeout": "1s", "interval": "5s", "unhealthy_threshold": 3,
                           "healthy_threshold": 1, "interval_jitter_percent": 20,
                           "http_health_check": {"path": "/"}}],
        "outlier_detection": {"consecutive_5xx": 5, "interval": "10s",
                              "enforcing_success_rate": 0,
                              "enforcing_consecutive_gateway_failure": 0,
                              "enforcing_failure_percentage": 0},
        "circuit_breakers": {"thresholds": [
            {"retry_budget": {"budget_percent": {"value": 20.0}, "min_retry_concurrency": 3}}
            if budget else {"max_retries": 10}]}})
    if not checks:
        del cluster["health_checks"], cluster["outlier_detection"]
    if lifetime_s is not None:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3."
                         "HttpProtocolOptions",
                "explicit_http_config": {"http_protocol_options": {}},
                "common_http_protocol_options": {"max_connection_duration": f"{lifetime_s}s"}}}
    return config


@target("envoy-podway-now", variant=True)
def envoy_podway_now(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-now")


@target("envoy-podway-before", variant=True)
def envoy_podway_before(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-before", filters_on=True, budget=True, real_ip=True)


@target("envoy-podway-filters", variant=True)
def envoy_podway_filters(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-filters", filters_on=True)


@target("envoy-podway-budget", variant=True)
def envoy_podway_budget(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-budget", budget=True)


@target("envoy-podway-realip", variant=True)
def envoy_podway_realip(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-realip", real_ip=True)


@target("envoy-podway-no-retries", variant=True)
def envoy_podway_no_retries(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-no-retries", retries=False)


@target("envoy-podway-no-checks", variant=True)
def envoy_podway_no_checks(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-no-checks", checks=False)


@target("envoy-podway-no-manager", variant=True)
def envoy_podway_no_manager(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-no-manager", manager=False)


@target("envoy-podway-keep-real-ip", variant=True)
def envoy_podway_keep_real_ip(ctx: Context) -> Running:
    return _podway_like(ctx, "envoy-podway-keep-real-ip", drop_real_ip=False)


@target("envoy-podway-no-lua", variant=True)
def envoy_podway_no_lua(ctx: Context) -> Running:
    """Without the disabled Lua filter (streamed body limits) Podway's managers carry."""
    return _podway_like(ctx, "envoy-podway-no-lua", lua=False)


@target("envoy-podway-lifetime", variant=True)
def envoy_podway_lifetime(ctx: Context) -> Running:
    """With nodeport mode's 1 s lifetime of the connections to members."""
    return _podway_like(ctx, "envoy-podway-lifetime", lifetime_s=1.0)


@target("envoy-podway-no-auth", variant=True)
def envoy_podway_no_auth(ctx: Context) -> Running:
    """Without edge auth's four disabled filters (basic auth, ext_authz HTTP and gRPC, the
    authorization RBAC): Podway's managers before issue 28."""
    return _podway_like(ctx, "envoy-podway-no-auth", auth=False)


@target("envoy-podway-bare", variant=True)
def envoy_podway_bare(ctx: Context) -> Running:
    """Without any optional filter: a manager whose routes use none of them carries none."""
    return _podway_like(ctx, "envoy-podway-bare", optional=False)


@target("envoy-podway-50-disabled", variant=True)
def envoy_podway_50_disabled(ctx: Context) -> Running:
    """With 41 more disabled filters (50 in all): what one disabled filter costs, times ~5."""
    return _podway_like(ctx, "envoy-podway-50-disabled", extra_disabled=41)


# --- Podway ------------------------------------------------------------------------------------
def podway_manifests(ctx: Context, folder: Path, tls_hosts: tuple[str, ...] = ()) -> None:
    """The same route as the static Envoy's: any host, prefix ``/``, one member (the
    upstream), on HTTP and on HTTPS (the certificate as the default). With ``tls_hosts``: a
    certificate named for those hosts instead, and the route for them too (HTTPS serves only
    the certificate's hosts; ``ready`` asks for the host ``bench``)."""
    import base64

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    hosts = f"hosts: [{', '.join(tls_hosts)}], " if tls_hosts else ""
    named = "".join(f"""  - host: {h}
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: up, port: {{number: 80}}}}}}}}
""" for h in tls_hosts)
    folder.mkdir()
    (folder / "route.yaml").write_text(f"""apiVersion: v1
kind: Service
metadata: {{name: up, namespace: bench}}
spec: {{ports: [{{name: http, port: 80, targetPort: {ctx.upstream_http}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: up-x, namespace: bench, labels: {{kubernetes.io/service-name: up}}}}
ports: [{{name: http, port: {ctx.upstream_http}}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: cert, namespace: bench}}
type: kubernetes.io/tls
data: {{tls.crt: {b64(ctx.cert)}, tls.key: {b64(ctx.key)}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: up
  namespace: bench
  annotations: {{podway.io/ssl-redirect: "false"}}
spec:
  ingressClassName: podway
  tls: [{{{hosts}secretName: cert}}]
  rules:
  - http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: up, port: {{number: 80}}}}}}}}
{named}""")


@target("podway")
def podway(ctx: Context) -> Running:
    return _podway(ctx, "podway", Path(sys.executable).with_name("podway"))


@target("podway-other", variant=True)
def podway_other(ctx: Context) -> Running:
    """``podway run`` of another checkout (``DATAPLANE_OTHER_PODWAY``: its ``podway``, e.g.
    main's venv), beside this one's in the same interleaved rounds: a change's before and
    after, paired per round."""
    other = os.environ.get("DATAPLANE_OTHER_PODWAY")
    if not other:
        raise SystemExit("podway-other: set DATAPLANE_OTHER_PODWAY to another podway command")
    return _podway(ctx, "podway-other", Path(other))


_DUMPS: dict[Path, dict[str, Any]] = {}  # Podway's config_dump, once per run (its folder)


def replica_target(name: str, changes: list[str]) -> Callable[[Context], Running]:
    """A target serving Podway's Envoy configuration from a file, with ``changes`` (names of
    ``dataplane_instructions.VARIANTS``: one setting taken out each) applied."""
    def start(ctx: Context) -> Running:
        import dataplane_instructions as di  # it imports this module: only when asked

        if ctx.root not in _DUMPS:
            _DUMPS[ctx.root] = di.podway_dump(ctx)
        http, https = free_port(), free_port()
        config = di.replica(_DUMPS[ctx.root], ctx, http, https)
        for change in changes:
            di.VARIANTS[change](config)
        return _plain(_envoy(ctx, name, config), http, https)
    return start


#: Podway's Envoy configuration read back from its admin (``/config_dump``) and served from a
#: file (``dataplane_instructions.replica``: routes inline, members as ``load_assignment``):
#: beside ``podway``, what the delivery over xDS (RDS, EDS, SDS, ECDS) costs per request;
#: beside ``envoy-static``, what the configuration costs. ``--replica-variants`` adds it with
#: one setting taken out (per CPU-second what ``dataplane_instructions.py --variants`` counts).
VARIANTS["podway-replica"] = replica_target("podway-replica", [])


def _podway(ctx: Context, name: str, cli: Path) -> Running:
    http, https = free_port(), free_port()
    folder = ctx.root / f"manifests-{name}"
    podway_manifests(ctx, folder)
    state = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))  # short: unix socket paths
    os.chmod(state, 0o700)
    proc = ctx.spawn([str(cli), "run", "--manifests", str(folder), "--address", "127.0.0.1",
                      "--http-port", str(http), "--https-port", str(https),
                      "--state-dir", str(state), "--log-level", "warning"], log=f"{name}.log")
    record = state / "envoy.json"

    def envoy_pid() -> list[int]:
        with contextlib.suppress(OSError, ValueError, KeyError):
            return [int(json.loads(record.read_text())["pid"])]
        return []

    deadline = time.monotonic() + 60
    while not envoy_pid():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"podway run did not start Envoy: see {ctx.root / name}.log")
        time.sleep(0.1)
    pids = envoy_pid()

    def stop() -> None:
        stop_process(proc, grace_s=20)
        for pid in pids:  # Envoy outlives a crashed Podway; a clean stop ends it too
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(state, ignore_errors=True)

    return Running(http, https, lambda: pids, stop, side_pids=lambda: [proc.pid])


def _named(pid: int, name: str) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip() == name
    return False


@target("podway-haproxy")
def podway_haproxy(ctx: Context) -> Running:
    """``podway run --engine haproxy`` on the same manifests: the HAProxy engine as Podway
    configures it (one thread); its CPU is the HAProxy processes' (master and worker)."""
    return _podway_haproxy(ctx, "podway-haproxy", Path(sys.executable).with_name("podway"))


@target("podway-haproxy-other", variant=True)
def podway_haproxy_other(ctx: Context) -> Running:
    """``podway run --engine haproxy`` of another checkout (``DATAPLANE_OTHER_PODWAY``, as
    ``podway-other``) beside this one's: a HAProxy rendering's before and after."""
    other = os.environ.get("DATAPLANE_OTHER_PODWAY")
    if not other:
        raise SystemExit("podway-haproxy-other: set DATAPLANE_OTHER_PODWAY")
    return _podway_haproxy(ctx, "podway-haproxy-other", Path(other))


def _podway_haproxy(ctx: Context, name: str, cli: Path) -> Running:
    http, https = free_port(), free_port()
    folder = ctx.root / f"manifests-{name}"
    podway_manifests(ctx, folder)
    state = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))  # short: unix socket paths
    os.chmod(state, 0o700)
    proc = ctx.spawn([str(cli), "run", "--engine", "haproxy", "--manifests", str(folder),
                      "--address", "127.0.0.1", "--http-port", str(http), "--https-port",
                      str(https), "--state-dir", str(state), "--log-level", "warning"],
                     log=f"{name}.log")

    def haproxy_pids() -> list[int]:
        return [p for p in tree(proc.pid) if p != proc.pid and _named(p, "haproxy")]

    deadline = time.monotonic() + 60
    while not haproxy_pids():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("podway run --engine haproxy did not start HAProxy: see "
                             f"{ctx.root / (name + '.log')}")
        time.sleep(0.1)

    def stop() -> None:
        pids = haproxy_pids()
        stop_process(proc, grace_s=20)
        for pid in pids:  # HAProxy outlives Podway on purpose (a restart takes it over)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(state, ignore_errors=True)

    return Running(http, https, haproxy_pids, stop, side_pids=lambda: [proc.pid])


# --- load --------------------------------------------------------------------------------------
def ready(port: int, *, tls: bool, what: str, limit_s: float = 60) -> None:
    """Until a GET on ``port`` answers 200."""
    deadline = time.monotonic() + limit_s
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    while True:
        with contextlib.suppress(OSError), \
                socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
            conn = context.wrap_socket(raw) if tls else raw
            conn.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            if conn.recv(64).startswith(b"HTTP/1.1 200"):
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: port {port} ({'https' if tls else 'http'}) never "
                             "answered 200")
        time.sleep(0.2)


@dataclass
class Sample:
    rps: float
    requests: int
    lb_cpu_s: float
    side_cpu_s: float
    errors: int

    @property
    def per_cpu_s(self) -> float:
        return self.requests / self.lb_cpu_s if self.lb_cpu_s > 0 else float("nan")


def _wrk(url: str, duration: int, close: bool) -> tuple[float, int, int]:
    args = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{duration}s", "--timeout", "5s"]
    if close:
        args += ["-H", "Connection: close"]
    out = subprocess.run([*args, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    found = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, total, errors + (int(found.group(1)) if found else 0)


def run_once(running: Running, workload: str, duration: int) -> Sample:
    tls = workload.startswith("https")
    port = running.https_port if tls else running.http_port
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/"
    lb, side = running.lb_pids(), running.side_pids()
    before, side_before = cpu_seconds(lb), cpu_seconds(side)
    rps, total, errors = _wrk(url, duration, workload.endswith("newconn"))
    return Sample(rps, total, cpu_seconds(lb) - before, cpu_seconds(side) - side_before, errors)


def certificate(root: Path) -> tuple[Path, Path]:
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=bench",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@contextlib.contextmanager
def started(names: list[str], root: Path) -> Iterator[dict[str, Running]]:
    cert, key = certificate(root)
    ctx = Context(root, free_port(), free_port(), cert, key, find_envoy())
    running: dict[str, Running] = {}
    try:
        start_upstream(ctx)
        ready(ctx.upstream_http, tls=False, what="upstream")
        every = {**TARGETS, **VARIANTS}
        for name in names:
            running[name] = every[name](ctx)
        for name, item in running.items():
            ready(item.http_port, tls=False, what=name)
            ready(item.https_port, tls=True, what=name)
        yield running
    finally:
        for item in running.values():
            with contextlib.suppress(Exception):
                item.stop()
        for proc in reversed(ctx.procs):
            stop_process(proc)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=2, help="seconds per run")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help=f"comma-separated, of {', '.join([*TARGETS, *VARIANTS])}")
    parser.add_argument("--variants", action="store_true",
                        help=f"also {', '.join(VARIANTS)} (what each default costs)")
    parser.add_argument("--replica-variants", default="",
                        help="comma-separated names of dataplane_instructions.py's variants "
                             "(A+B: both): podway-replica with that setting taken out")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    names = [n for n in args.targets.split(",") if n]
    if args.variants:
        wanted = {"podway-other": "DATAPLANE_OTHER_PODWAY",  # variants that need a setting
                  "podway-haproxy-other": "DATAPLANE_OTHER_PODWAY",
                  "haproxy-tls-other": OTHER_HAPROXY}
        names += [n for n in VARIANTS if n not in names
                  and (n not in wanted or os.environ.get(wanted[n]))]
    names += _replica_variants(parser, args.replica_variants)
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = [n for n in names if n not in TARGETS and n not in VARIANTS] + [
        w for w in workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown target or workload: {', '.join(unknown)}")
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    other = (f"haproxy: {haproxy_version()}; haproxy-tls-other: {haproxy_version(other=True)}"
             if "haproxy-tls-other" in names else "")  # before the reference: fails fast
    ref = measure()
    say(ref.describe())
    say(f"load average at the start: {load_average()} (2-core machine shared with others)")
    if other:
        say(other)
    samples: dict[tuple[str, str], list[Sample]] = {}
    keep = os.environ.get("DATAPLANE_KEEP")  # a folder to keep the logs in (debugging)
    with (contextlib.nullcontext(keep) if keep
          else tempfile.TemporaryDirectory(prefix="podway-dataplane-")) as tmp, \
            started(names, Path(tmp)) as running:
        for r in range(args.rounds):
            for workload in workloads:
                order = random.Random(r).sample(names, len(names))  # a new order each round
                for name in order:
                    sample = run_once(running[name], workload, args.duration)
                    samples.setdefault((name, workload), []).append(sample)
            say(f"round {r + 1}/{args.rounds} done, load average {load_average()}")
    end = ref.check_again()
    say(end)
    report = _report(samples, names, workloads, args, ref.seconds)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)


def _replica_variants(parser: argparse.ArgumentParser, wanted: str) -> list[str]:
    """Register ``podway-replica-<variant>`` for each of ``wanted``; their names."""
    if not wanted:
        return []
    import dataplane_instructions as di  # it imports this module: only when asked

    names = []
    for item in wanted.split(","):
        changes = [c for c in item.split("+") if c]
        unknown = [c for c in changes if c not in di.VARIANTS]
        if unknown or not changes:
            parser.error(f"unknown replica variant: {item} (of {', '.join(di.VARIANTS)})")
        VARIANTS[f"podway-replica-{item}"] = replica_target(f"podway-replica-{item}", changes)
        names.append(f"podway-replica-{item}")
    return names


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _report(samples: dict[tuple[str, str], list[Sample]], names: list[str],
            workloads: list[str], args: argparse.Namespace, ref_s: float) -> dict[str, Any]:
    rows = []
    for workload in workloads:
        base = samples.get(("envoy-static", workload))
        edge = samples.get(("envoy-edge", workload))
        for name in names:
            got = samples[(name, workload)]
            per_cpu = _median([s.per_cpu_s for s in got])
            # Paired: each round's ratio to envoy-static's figure of the same round (they ran
            # back to back), then the median: the machine's drift between rounds cancels.
            ratio, to_edge = _paired(got, base), _paired(got, edge)
            rows.append({
                "workload": workload, "target": name,
                "rps": round(_median([s.rps for s in got]), 1),
                "per_lb_cpu_s": round(per_cpu, 1),
                "per_lb_cpu_s_rounds": [round(s.per_cpu_s, 1) for s in got],
                "lb_cpu_share": round(_median([s.lb_cpu_s / args.duration for s in got]), 3),
                "control_plane_cpu_s": round(sum(s.side_cpu_s for s in got), 2),
                "errors": sum(s.errors for s in got),
                "vs_envoy_static": round(ratio, 3) if ratio is not None else None,
                **({"vs_envoy_edge": round(to_edge, 3)} if to_edge is not None else {})})
    return {"reference_ms": round(ref_s * 1000, 1), "load_average_end": load_average(),
            "rounds": args.rounds, "duration_s": args.duration, "connections": CONNECTIONS,
            "rows": rows}


def _paired(got: list[Sample], base: list[Sample] | None) -> float | None:
    """The median over rounds of ``got``'s per-CPU-second figure / ``base``'s of the round."""
    if not base:
        return None
    return _median([a.per_cpu_s / b.per_cpu_s for a, b in zip(got, base, strict=True)
                    if b.per_cpu_s > 0])


def _print(report: dict[str, Any]) -> None:
    print(f"\n{report['rounds']} interleaved rounds of {report['duration_s']} s, wrk -t1 "
          f"-c{report['connections']}, median per target; per LB CPU-s = requests / (utime + "
          "stime of the load balancer's own processes); x static = median over rounds of per LB "
          "CPU-s / envoy-static's in the same round")
    edge = any("vs_envoy_edge" in row for row in report["rows"])
    if edge:
        print("x edge = the same against envoy-edge (envoy-static with the settings Envoy's "
              "docs ask of an edge proxy): a second yardstick, beside the first")
    edge_head = f" {'x edge':>7}" if edge else ""
    wide = max([18, *(len(row["target"]) for row in report["rows"])])
    head = (f"{'workload':<16} {'target':<{wide}} {'rps':>9} {'per LB CPU-s':>13} "
            f"{'LB CPU':>7} {'x static':>9}{edge_head} "
            f"{'errors':>7}  rounds (per LB CPU-s)")
    print(head)
    print("-" * len(head))
    for row in report["rows"]:
        ratio = f"{row['vs_envoy_static']:.3f}" if row["vs_envoy_static"] else "-"
        side = (f"  (control plane {row['control_plane_cpu_s']} CPU-s in all rounds)"
                if row["control_plane_cpu_s"] else "")
        to_edge = (f" {row['vs_envoy_edge']:>7.3f}" if "vs_envoy_edge" in row
                   else f" {'-':>7}" if edge else "")
        print(f"{row['workload']:<16} {row['target']:<{wide}} {row['rps']:>9.0f} "
              f"{row['per_lb_cpu_s']:>13.0f} {row['lb_cpu_share']:>7.2f} {ratio:>9}{to_edge} "
              f"{row['errors']:>7}  {row['per_lb_cpu_s_rounds']}{side}")


if __name__ == "__main__":
    main()
