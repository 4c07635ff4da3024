"""Instructions per request: Podway's Envoy beside a static Envoy, a figure load does not distort.

``bench/dataplane.py`` divides requests by the CPU-seconds of the load balancer; on a shared
machine that moves 10-15 % between rounds. This bench counts the instructions Envoy executes
per request instead, which does not depend on what else the machine runs:

1. ``podway run`` serves ``dataplane.py``'s route (HTTP and HTTPS, one member: an nginx);
   its Envoy's configuration is read from the admin socket (``/config_dump``) and turned into
   a static bootstrap (``replica``): the same listeners, managers, filters, route tables,
   clusters and bootstrap settings, only delivered from a file instead of xDS (routes inline,
   members as ``load_assignment``, the certificate as files). Podway is then stopped.
2. ``envoy-static`` (``dataplane.py``'s yardstick) and ``podway-replica`` run side by side,
   one worker each, and the same ``wrk`` load goes through each in interleaved rounds, for
   every workload (HTTP/1.1 keep-alive, a new connection per request, HTTPS keep-alive, a new
   TLS handshake per request).
3. The instructions of each run are counted with ``perf stat -e instructions -p PID`` where
   the CPU has counters; where it has none (a VM: ``<not supported>``, as on this project's
   machines), Envoy runs under Valgrind's callgrind, whose counters are zeroed before and
   dumped after each run (``callgrind_control``): exact instruction counts of every thread,
   about 50x slower, which only lowers the request rate, not the count per request.

Printed per workload: instructions per request of each, and ``x static`` = static's
instructions per request / Podway's (the same sense as ``dataplane.py``'s requests per
CPU-second ratio: 1.0 is as cheap as the static Envoy, 0.87 is 15 % more work per request).
The "worker" figure counts Envoy's worker thread only (the requests' own work); the "all"
figure adds the main thread. Timers (stats flush, health checks) run per wall-clock second, and
a run under Valgrind lasts ~50x longer than the same requests natively: each Envoy's idle rate
(``--idle`` seconds without requests) times the run's length is taken off its count.

``--variants A,B`` adds replicas with one of Podway's settings removed (``VARIANTS``): what
each costs per request (the bisection of docs/performance.md, "Where the tax was").

``--cache-sim`` (callgrind only) also simulates the caches and branch predictors and prints the
worker's misses per request (``SIMULATED``): whether a setting costs more time than its
instructions through misses Valgrind can model (not the TLBs).

``--edge`` adds ``envoy-edge``: the static Envoy with the settings Envoy's own edge-proxy guide
asks for (``dataplane.edge_settings``), a second yardstick beside ``envoy-static``.

    python bench/dataplane_instructions.py [--rounds 2] [--duration 5] [--requests 2000]
        [--new-connections 200] [--variants ...] [--edge] [--cache-sim] [--tls-hosts bench]
        [--json]

It kills only the processes it started; Valgrind's start-up of Envoy takes 1-5 minutes on a
loaded machine.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dataplane as dp
from speedref import measure

from podway.envoy.engine.process import find_envoy

NOBODY = "podway-nobody:{SHA}AAAAAAAAAAAAAAAAAAAAAAAAAAA="  # the dump redacts basic auth users


# --- Podway's configuration as a static bootstrap ----------------------------------------------
def podway_dump(ctx: dp.Context, tls_hosts: tuple[str, ...] = ()) -> dict[str, Any]:
    """``podway run`` on ``dataplane.py``'s route (``tls_hosts``: its certificate named for
    them); its Envoy's ``/config_dump`` (with EDS)."""
    folder = ctx.root / "manifests"
    dp.podway_manifests(ctx, folder, tls_hosts)
    state = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))  # short: unix socket paths
    os.chmod(state, 0o700)
    http, https = dp.free_port(), dp.free_port()
    cli = Path(sys.executable).with_name("podway")
    proc = ctx.spawn([str(cli), "run", "--manifests", str(folder), "--address", "127.0.0.1",
                      "--http-port", str(http), "--https-port", str(https),
                      "--state-dir", str(state), "--log-level", "warning"], log="podway.log")
    try:
        dp.ready(http, tls=False, what="podway")
        dp.ready(https, tls=True, what="podway")
        out = subprocess.run(["curl", "-sf", "--unix-socket", str(state / "admin.sock"),
                              "http://admin/config_dump?include_eds"],
                             capture_output=True, check=True).stdout
        dump: dict[str, Any] = json.loads(out)
        return dump
    finally:
        dp.stop_process(proc, grace_s=20)
        shutil.rmtree(state, ignore_errors=True)


def _by_type(dump: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["@type"].rsplit(".", 1)[1]: c for c in dump["configs"]}


def _chains(listener: dict[str, Any]) -> list[dict[str, Any]]:
    return [*listener.get("filter_chains", []),
            *([listener["default_filter_chain"]] if "default_filter_chain" in listener else [])]


def managers(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every HTTP connection manager of a static bootstrap."""
    for listener in config["static_resources"]["listeners"]:
        for chain in _chains(listener):
            for item in chain["filters"]:
                if item["name"].endswith("http_connection_manager"):
                    yield item["typed_config"]


def replica(dump: dict[str, Any], ctx: dp.Context, http: int, https: int) -> dict[str, Any]:
    """Podway's configuration (``dump``) as a static bootstrap on ``http``/``https``."""
    parts = _by_type(dump)
    config: dict[str, Any] = copy.deepcopy(parts["BootstrapConfigDump"]["bootstrap"])
    for key in ("dynamic_resources", "node"):
        config.pop(key, None)
    config["admin"] = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}}
    tables = {r["route_config"]["name"]: r["route_config"]
              for r in parts["RoutesConfigDump"].get("dynamic_route_configs", [])}
    members = {e["endpoint_config"]["cluster_name"]: e["endpoint_config"]
               for e in parts["EndpointsConfigDump"].get("dynamic_endpoint_configs", [])}
    extensions = {f["ecds_filter"]["name"]: f["ecds_filter"]["typed_config"]
                  for f in parts["EcdsConfigDump"].get("ecds_filters", [])}
    listeners = []
    for item in parts["ListenersConfigDump"]["dynamic_listeners"]:
        listener = copy.deepcopy(item["active_state"]["listener"])
        listener.pop("@type")
        tls = any("transport_socket" in c for c in _chains(listener))
        listener["address"]["socket_address"]["port_value"] = https if tls else http
        for chain in _chains(listener):
            _static_chain(chain, tables, extensions, ctx)
        listeners.append(listener)
    clusters = []
    for item in parts["ClustersConfigDump"]["dynamic_active_clusters"]:
        cluster = copy.deepcopy(item["cluster"])
        cluster.pop("@type")
        if cluster.pop("eds_cluster_config", None) is not None:
            cluster["type"] = "STATIC"
            cluster["load_assignment"] = _assignment(members[cluster["name"]])
        clusters.append(cluster)
    config["static_resources"] = {"listeners": listeners, "clusters": clusters}
    return config


def _static_chain(chain: dict[str, Any], tables: dict[str, Any], extensions: dict[str, Any],
                  ctx: dp.Context) -> None:
    for item in chain["filters"]:
        manager = item["typed_config"]
        rds = manager.pop("rds", None)
        if rds is not None:
            table = copy.deepcopy(tables[rds["route_config_name"]])
            table.pop("@type")
            manager["route_config"] = table
        for http_filter in manager.get("http_filters", []):
            found = http_filter.pop("config_discovery", None)
            if found is not None:
                http_filter["typed_config"] = extensions[http_filter["name"]]
            users = http_filter.get("typed_config", {}).get("users")
            if users is not None:
                users["inline_string"] = NOBODY
    socket = chain.get("transport_socket")
    if socket is not None:
        common = socket["typed_config"]["common_tls_context"]
        common.pop("tls_certificate_sds_secret_configs", None)
        common["tls_certificates"] = [{"certificate_chain": {"filename": str(ctx.cert)},
                                       "private_key": {"filename": str(ctx.key)}}]


def _assignment(found: dict[str, Any]) -> dict[str, Any]:
    """A dumped ClusterLoadAssignment as a cluster's ``load_assignment``: the dump writes the
    defaults (weight 0, empty locality) that a bootstrap may not hold."""
    out = copy.deepcopy(found)
    out.pop("@type", None)
    for locality in out.get("endpoints", []):
        if not locality.get("load_balancing_weight"):
            locality.pop("load_balancing_weight", None)
        if not locality.get("locality"):
            locality.pop("locality", None)
    return out


# --- variants: one of Podway's settings taken out ----------------------------------------------
VARIANTS: dict[str, Callable[[dict[str, Any]], None]] = {}


def variant(fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    VARIANTS[fn.__name__.replace("_", "-")] = fn
    return fn


@variant
def no_stats_matcher(config: dict[str, Any]) -> None:
    """Every stat kept (``--envoy-stats detailed``'s bootstrap)."""
    config.pop("stats_config", None)


@variant
def dynamic_stats(config: dict[str, Any]) -> None:
    """The router's per-pool response-code and timing stats on (Envoy's default)."""
    for manager in managers(config):
        for item in manager["http_filters"]:
            if item["name"] == "envoy.filters.http.router":
                item["typed_config"].pop("dynamic_stats", None)


@variant
def no_optional_filters(config: dict[str, Any]) -> None:
    """Only the router on each manager."""
    for manager in managers(config):
        manager["http_filters"] = [f for f in manager["http_filters"]
                                   if f["name"] == "envoy.filters.http.router"]


@variant
def no_manager_settings(config: dict[str, Any]) -> None:
    """The manager without the client address, path normalisation and host-port stripping."""
    for manager in managers(config):
        for key in ("use_remote_address", "xff_num_trusted_hops", "normalize_path",
                    "merge_slashes", "strip_any_host_port", "strip_trailing_host_dot",
                    "upgrade_configs"):
            manager.pop(key, None)


@variant
def no_route_settings(config: dict[str, Any]) -> None:
    """Route tables without retries, WebSocket upgrades, names and the X-Real-IP removal."""
    for manager in managers(config):
        table = manager["route_config"]
        table.pop("request_headers_to_remove", None)
        for host in table["virtual_hosts"]:
            host.pop("retry_policy", None)
            for route in host["routes"]:
                route.pop("name", None)
                route.get("route", {}).pop("upgrade_configs", None)


@variant
def no_retries(config: dict[str, Any]) -> None:
    """Route tables without the connect-failure retries."""
    for manager in managers(config):
        for host in manager["route_config"]["virtual_hosts"]:
            host.pop("retry_policy", None)


@variant
def no_cluster_settings(config: dict[str, Any]) -> None:
    """Pools without checks, outlier detection, circuit breakers and LB settings."""
    for cluster in config["static_resources"]["clusters"]:
        for key in ("health_checks", "outlier_detection", "circuit_breakers",
                    "common_lb_config", "ignore_health_on_host_removal"):
            cluster.pop(key, None)


@variant
def no_real_ip_removal(config: dict[str, Any]) -> None:
    """Route tables that leave a client's own X-Real-IP in place."""
    for manager in managers(config):
        manager["route_config"].pop("request_headers_to_remove", None)


@variant
def no_client_address(config: dict[str, Any]) -> None:
    """The manager without ``use_remote_address`` (no X-Forwarded-For appended)."""
    for manager in managers(config):
        manager.pop("use_remote_address", None)


@variant
def no_path_normalisation(config: dict[str, Any]) -> None:
    for manager in managers(config):
        manager.pop("normalize_path", None)
        manager.pop("merge_slashes", None)


@variant
def no_tls_inspector(config: dict[str, Any]) -> None:
    """Listeners without the TLS inspector (SNI is then unknown: one chain only)."""
    for listener in config["static_resources"]["listeners"]:
        listener.pop("listener_filters", None)


@variant
def tls_inspector(config: dict[str, Any]) -> None:
    """The TLS inspector on every HTTPS listener, as before Podway put it only where a chain
    is chosen by SNI (the "before" of a default-only listener's new TLS handshake)."""
    for listener in config["static_resources"]["listeners"]:
        if any("transport_socket" in c for c in _chains(listener)) and not any(
                f["name"].endswith("tls_inspector") for f in listener.get("listener_filters", [])):
            listener.setdefault("listener_filters", []).append({
                "name": "envoy.filters.listener.tls_inspector", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.listener."
                             "tls_inspector.v3.TlsInspector"}})


def _same_chain(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two chains that do the same once chosen (their names and matches aside)."""
    return all(a.get(k) == b.get(k) for k in ("filters", "transport_socket"))


def _drop_inspector(listener: dict[str, Any]) -> None:
    kept = [f for f in listener.get("listener_filters", [])
            if not f["name"].endswith("tls_inspector")]
    if kept:
        listener["listener_filters"] = kept
    else:
        listener.pop("listener_filters", None)


@variant
def no_sni_chain(config: dict[str, Any]) -> None:
    """A listener's one named chain left out where it equals the default chain (one named
    certificate: the default then serves every SNI), and with it the TLS inspector."""
    for listener in config["static_resources"]["listeners"]:
        chains = listener.get("filter_chains", [])
        default = listener.get("default_filter_chain")
        if default is not None and len(chains) == 1 and _same_chain(chains[0], default):
            listener.pop("filter_chains")
            _drop_inspector(listener)


@variant
def sni_chain(config: dict[str, Any]) -> None:
    """The reverse of ``no-sni-chain``: a default-only listener with a certificate gets a
    named chain equal to its default (for ``bench``: with ``--tls-hosts bench`` Podway's
    build before the change) and the TLS inspector."""
    for listener in config["static_resources"]["listeners"]:
        default = listener.get("default_filter_chain")
        if listener.get("filter_chains") or default is None or "transport_socket" not in default:
            continue
        named = copy.deepcopy(default)
        named["name"] = "named"  # Podway names it after the certificate
        named["filter_chain_match"] = {"server_names": ["bench"]}
        listener["filter_chains"] = [named]
        tls_inspector(config)


def _routers(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for manager in managers(config):
        for item in manager["http_filters"]:
            if item["name"] == "envoy.filters.http.router":
                yield item.setdefault("typed_config", {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"})


@variant
def suppress_envoy_headers(config: dict[str, Any]) -> None:
    """The routers add no ``x-envoy-*`` headers (``x-envoy-upstream-service-time`` to the
    client, ``x-envoy-expected-rq-timeout-ms`` and ``x-envoy-original-path`` to the member)."""
    for router in _routers(config):
        router["suppress_envoy_headers"] = True


@variant
def envoy_headers(config: dict[str, Any]) -> None:
    """The reverse of ``suppress-envoy-headers``: the routers add Envoy's ``x-envoy-*``."""
    for router in _routers(config):
        router.pop("suppress_envoy_headers", None)


@variant
def no_overload_manager(config: dict[str, Any]) -> None:
    """No global downstream connection limit."""
    config.pop("overload_manager", None)


@variant
def no_host_port_strip(config: dict[str, Any]) -> None:
    """The manager without ``strip_any_host_port``."""
    for manager in managers(config):
        manager.pop("strip_any_host_port", None)


@variant
def port_ignored_in_matching(config: dict[str, Any]) -> None:
    """``ignore_port_in_host_matching`` on the route table instead of the manager's
    ``strip_any_host_port`` (the Host keeps its port on the way to the member)."""
    for manager in managers(config):
        manager.pop("strip_any_host_port", None)
        manager["route_config"]["ignore_port_in_host_matching"] = True


@variant
def real_ip_inline(config: dict[str, Any]) -> None:
    """X-Real-IP registered as an inline request header (``inline_headers``): its removal is
    a slot lookup instead of a search of the header list."""
    config["inline_headers"] = [{"inline_header_name": "x-real-ip",
                                 "inline_header_type": "REQUEST_HEADER"}]


@variant
def no_inline_headers(config: dict[str, Any]) -> None:
    """Without the bootstrap's ``inline_headers`` (Podway before X-Real-IP got a slot)."""
    config.pop("inline_headers", None)


@variant
def retries_any_host(config: dict[str, Any]) -> None:
    """Connect-failure retries without the previous-hosts predicate."""
    for manager in managers(config):
        for host in manager["route_config"]["virtual_hosts"]:
            policy = host.get("retry_policy", {})
            policy.pop("retry_host_predicate", None)
            policy.pop("host_selection_retry_max_attempts", None)


@variant
def no_upgrades(config: dict[str, Any]) -> None:
    """No WebSocket upgrade settings (manager nor routes)."""
    for manager in managers(config):
        manager.pop("upgrade_configs", None)
        for host in manager["route_config"]["virtual_hosts"]:
            for route in host["routes"]:
                route.get("route", {}).pop("upgrade_configs", None)


# --- counting instructions ---------------------------------------------------------------------
def perf_counts_instructions() -> bool:
    """Whether ``perf`` can count instructions here (no PMU in most VMs)."""
    if shutil.which("perf") is None:
        return False
    done = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"],
                          check=False, capture_output=True, text=True)
    return done.returncode == 0 and "<not" not in done.stderr


@dataclass
class Count:
    """Instructions of one run: all of Envoy's threads, and its worker thread(s) only;
    ``simulated``: the worker's cache misses and mispredicted branches (``--cache-sim``)."""

    all: int
    worker: int
    simulated: dict[str, int] = field(default_factory=dict)


#: Callgrind's simulated events printed with ``--cache-sim``: misses of the first-level
#: instruction cache, of the first-level data cache (read, write), of the last level (code,
#: data read), mispredicted conditional and indirect branches.
SIMULATED = ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "Bcm", "Bim")


class Callgrind:
    """Envoy under callgrind; counters zeroed before a run and dumped after it."""

    name = "callgrind"

    def __init__(self, folder: Path, *, cache_sim: bool = False) -> None:
        self.folder = folder
        self.cache_sim = cache_sim
        if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
            raise SystemExit("no hardware counters for perf and no valgrind: cannot count "
                             "instructions here")

    def command(self, name: str, envoy: list[str]) -> list[str]:
        sim = ["--cache-sim=yes", "--branch-sim=yes"] if self.cache_sim else []
        return ["valgrind", "--tool=callgrind", "--separate-threads=yes", *sim,
                f"--callgrind-out-file={self.folder}/cg.{name}.%p", *envoy]

    def count(self, pid: int, run: Callable[[], None]) -> Count:
        pattern = re.compile(rf"^cg\.[\w.-]+\.{pid}\.(\d+)-(\d+)$")
        subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
        before = {p.name for p in self.folder.iterdir()}
        run()
        subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
        # One file per thread; a file is complete once its "totals:" line is written.
        deadline = time.monotonic() + 120
        while True:
            new = [p for p in self.folder.iterdir() if p.name not in before
                   and pattern.match(p.name)]
            totals = {p: _totals(p) for p in new}
            if new and all(v is not None for v in totals.values()):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"callgrind wrote no complete dump for {pid}")
            time.sleep(0.5)
        out = Count(0, 0)
        for path, total in totals.items():
            thread = int(pattern.match(path.name).group(2))  # type: ignore[union-attr]
            out.all += total or 0
            out.worker += 0 if thread == 1 else total or 0  # thread 1: the main thread
            if thread != 1 and self.cache_sim:
                for event, value in _events(path).items():
                    out.simulated[event] = out.simulated.get(event, 0) + value
            path.unlink()
        return out


def _events(path: Path) -> dict[str, int]:
    """The ``SIMULATED`` events of a complete callgrind dump."""
    text = path.read_text()
    names = re.search(r"^events: (.*)$", text, re.M)
    values = re.search(r"^summary: (.*)$", text, re.M)
    if names is None or values is None:
        return {}
    found = dict(zip(names.group(1).split(), (int(v) for v in values.group(1).split()),
                     strict=False))
    return {k: v for k, v in found.items() if k in SIMULATED}


def _totals(path: Path) -> int | None:
    with contextlib.suppress(OSError):
        text = path.read_text()
        found = re.search(r"^summary: (\d+)", text, re.M) if "\ntotals: " in text else None
        if found:
            return int(found.group(1))
    return None


class Perf:
    """Native Envoy; ``perf stat --per-thread -p PID`` around each run."""

    name = "perf"

    def __init__(self, event: str = "instructions") -> None:
        self.event = event

    def command(self, name: str, envoy: list[str]) -> list[str]:
        return envoy

    def count(self, pid: int, run: Callable[[], None]) -> Count:
        perf = subprocess.Popen(["perf", "stat", "-x,", "--per-thread", "-e", self.event,
                                 "-p", str(pid)], stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # attached
        try:
            run()
        finally:
            perf.send_signal(signal.SIGINT)
            _, err = perf.communicate(timeout=30)
        out = Count(0, 0)
        for line in err.splitlines():  # "thread-tid,count,unit,event,..."
            fields = line.split(",")
            if len(fields) < 4 or not fields[1].replace(".", "").isdigit():
                continue
            value = int(float(fields[1]))
            out.all += value
            out.worker += value if fields[0].startswith("wrk:") else 0  # Envoy's workers
        return out


# --- the run -----------------------------------------------------------------------------------
@dataclass
class Envoy:
    name: str
    pid: int
    http: int
    https: int


def _edge(ctx: dp.Context, http: int, https: int) -> dict[str, Any]:
    config = dp._static_bootstrap(ctx, http, https)
    dp.edge_settings(config)
    return config


def start_envoys(ctx: dp.Context, counter: Callgrind | Perf, variants: list[str],
                 *, edge: bool = False, tls_hosts: tuple[str, ...] = ()) -> list[Envoy]:
    """envoy-static, podway-replica and each variant of the replica, started at once;
    ``edge``: also ``envoy-edge`` (``dataplane.edge_settings``); ``tls_hosts``: Podway's
    certificate named for them."""
    dump = podway_dump(ctx, tls_hosts)
    wanted: list[tuple[str, Callable[[int, int], dict[str, Any]]]] = [
        ("envoy-static", lambda h, s: dp._static_bootstrap(ctx, h, s)),
        *([("envoy-edge", lambda h, s: _edge(ctx, h, s))] if edge else []),
        ("podway-replica", lambda h, s: replica(dump, ctx, h, s))]
    for name in variants:
        def changed(h: int, s: int, change: Callable[[dict[str, Any]], None] = VARIANTS[name]
                    ) -> dict[str, Any]:
            config = replica(dump, ctx, h, s)
            change(config)
            return config
        wanted.append((f"replica-{name}", changed))
    out = []
    for name, make in wanted:
        http, https = dp.free_port(), dp.free_port()
        path = ctx.root / f"{name}.json"
        config = make(http, https)
        # Admin on a unix socket: an ephemeral admin port of one Envoy, bound while the others
        # start (minutes under Valgrind), could take a listener port chosen for another.
        config["admin"] = {"address": {"pipe": {"path": str(ctx.root / f"{name}.admin")}}}
        path.write_text(json.dumps(config))
        envoy = [str(ctx.envoy), "-c", str(path), "--concurrency", "1",
                 "--disable-hot-restart", "-l", "error"]
        checked = subprocess.run([*envoy, "--mode", "validate"], check=False,
                                 capture_output=True, text=True)
        if checked.returncode != 0:
            raise SystemExit(f"{name}: Envoy refuses the bootstrap: {checked.stderr[-400:]}")
        proc = ctx.spawn(counter.command(name, envoy), log=f"{name}.log")
        out.append(Envoy(name, proc.pid, http, https))
    for item in out:  # under Valgrind Envoy starts in minutes, not seconds
        dp.ready(item.http, tls=False, what=item.name, limit_s=900)
        dp.ready(item.https, tls=True, what=item.name, limit_s=300)
    return out


def idle_rate(counter: Callgrind | Perf, envoy: Envoy, seconds: float) -> Count:
    """What ``envoy`` executes per second with no request (timers: checks, stats flush, ...):
    under Valgrind a run lasts ~50x longer, and that background would be charged to its few
    requests, more to the slower target. ``measure_once`` takes it off."""
    count = counter.count(envoy.pid, lambda: time.sleep(seconds))
    return Count(round(count.all / seconds), round(count.worker / seconds))


#: The Host h2load sends (``--tls-hosts``: the first; Podway's HTTPS then serves only those).
AUTHORITY: list[str] = []


def _h2load(url: str, requests: int, connections: int = dp.CONNECTIONS
            ) -> tuple[float, int, int]:
    """``requests`` HTTP/1.1 requests over ``connections`` connections (as many as requests:
    one request per connection)."""
    host = [f"-H:authority: {AUTHORITY[0]}"] if AUTHORITY else []
    out = subprocess.run(["h2load", "--h1", "-t1", f"-c{connections}", f"-n{requests}", *host,
                          url], capture_output=True, text=True, check=True).stdout
    found = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, "
                      r"(\d+) failed, (\d+) errored", out)
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if found is None or rate is None:
        raise SystemExit(f"h2load: unexpected output: {out[-400:]}")
    ok, failed, errored = (int(g) for g in found.groups())
    return float(rate.group(1)), ok, failed + errored


def measure_once(counter: Callgrind | Perf, envoy: Envoy, workload: str, duration: int,
                 idle: Count, *, requests: int = 0, new_connections: int = 0
                 ) -> dict[str, float]:
    """One run; keep-alive workloads with ``requests`` > 0 send that many (h2load) instead of
    ``duration`` seconds of wrk: the 16 connections' set-up is then the same share of every
    target's count, where a fixed duration gives a slower target fewer requests to spread it
    over. New-connection workloads with ``new_connections`` > 0: that many connections of one
    request each (h2load), all complete; wrk's run ends with up to 16 connections (handshakes)
    done but their requests not counted, a large error when a run has ~50 requests."""
    tls = workload.startswith("https")
    url = f"{'https' if tls else 'http'}://127.0.0.1:{envoy.https if tls else envoy.http}/"
    got: dict[str, float] = {}
    close = workload.endswith("newconn")

    def run() -> None:
        if requests and not close:
            got["rps"], got["requests"], got["errors"] = _h2load(url, requests)
        elif new_connections and close:
            got["rps"], got["requests"], got["errors"] = _h2load(url, new_connections,
                                                                 new_connections)
        else:
            got["rps"], got["requests"], got["errors"] = dp._wrk(url, duration, close)
    before, started = dp.cpu_seconds([envoy.pid]), time.monotonic()
    count = counter.count(envoy.pid, run)
    wall, cpu_s = time.monotonic() - started, dp.cpu_seconds([envoy.pid]) - before
    done = max(got["requests"], 1)
    # Simulated events: the whole run's, idle timers not taken off (few on the worker).
    simulated = {f"sim_{k}_per_request": v / done for k, v in count.simulated.items()}
    return {**simulated, "requests": got["requests"], "errors": got["errors"],
            "all_per_request": (count.all - idle.all * wall) / done,
            "worker_per_request": (count.worker - idle.worker * wall) / done,
            "per_cpu_s": done / cpu_s if cpu_s > 0 else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=int, default=5, help="seconds of wrk per run")
    parser.add_argument("--requests", type=int, default=0,
                        help="keep-alive runs: this many requests (h2load) instead of "
                             "--duration seconds (wrk)")
    parser.add_argument("--new-connections", type=int, default=0,
                        help="new-connection runs: this many connections of one request each "
                             "(h2load) instead of --duration seconds (wrk)")
    parser.add_argument("--idle", type=float, default=10,
                        help="seconds of the idle measure taken off each run")
    parser.add_argument("--workloads", default=",".join(dp.WORKLOADS))
    parser.add_argument("--variants", default="",
                        help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--tls-hosts", default="",
                        help="comma-separated: Podway's certificate is named for these hosts "
                             "(one named certificate) instead of serving without a name")
    parser.add_argument("--edge", action="store_true",
                        help="also envoy-edge: the static Envoy with the settings Envoy's "
                             "edge-proxy guide asks for (dataplane.edge_settings)")
    parser.add_argument("--counter", choices=("auto", "perf", "callgrind"), default="auto")
    parser.add_argument("--cache-sim", action="store_true",
                        help="callgrind only: also simulate the caches and branch predictors "
                             "and print the worker's misses per request (slower)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    variants = [v for v in args.variants.split(",") if v]
    unknown = [w for w in workloads if w not in dp.WORKLOADS] + [
        v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown workload or variant: {', '.join(unknown)}")
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    ref = measure()
    say(ref.describe())
    say(f"load average at the start: {dp.load_average()} (2-core machine shared with others)")
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    keep = os.environ.get("DATAPLANE_KEEP")  # a folder to keep the logs in (debugging)
    with (contextlib.nullcontext(keep) if keep
          else tempfile.TemporaryDirectory(prefix="podway-instructions-")) as tmp:
        root = Path(tmp)
        perf = args.counter == "perf" or (args.counter == "auto" and perf_counts_instructions())
        counter: Callgrind | Perf = Perf() if perf else Callgrind(root,
                                                                 cache_sim=args.cache_sim)
        say(f"counting instructions with {counter.name}")
        with _context(root) as ctx:
            tls_hosts = tuple(h for h in args.tls_hosts.split(",") if h)
            AUTHORITY[:] = tls_hosts[:1]
            envoys = start_envoys(ctx, counter, variants, edge=args.edge, tls_hosts=tls_hosts)
            idle = {e.name: idle_rate(counter, e, args.idle) for e in envoys}
            for name, rate in idle.items():
                say(f"{name} idle: {rate.all:,} instructions/s ({rate.worker:,} on its worker)")
            for r in range(args.rounds):
                for workload in workloads:
                    order = envoys if r % 2 == 0 else envoys[::-1]  # interleaved
                    for envoy in order:
                        sample = measure_once(counter, envoy, workload, args.duration,
                                              idle[envoy.name], requests=args.requests,
                                              new_connections=args.new_connections)
                        samples.setdefault((envoy.name, workload), []).append(sample)
                        say(f"  {workload} {envoy.name}: {sample['worker_per_request']:,.0f} "
                            f"worker / {sample['all_per_request']:,.0f} all per request")
                say(f"round {r + 1}/{args.rounds} done, load average {dp.load_average()}")
    say(ref.check_again())
    report = _report(samples, [e.name for e in envoys], workloads, counter.name, ref.seconds)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)


@contextlib.contextmanager
def _context(root: Path) -> Iterator[dp.Context]:
    cert, key = dp.certificate(root)
    ctx = dp.Context(root, dp.free_port(), dp.free_port(), cert, key, find_envoy())
    try:
        dp.start_upstream(ctx)
        dp.ready(ctx.upstream_http, tls=False, what="upstream")
        yield ctx
    finally:
        for proc in reversed(ctx.procs):
            dp.stop_process(proc, grace_s=60)  # Valgrind writes its last dump on the way out


def _report(samples: dict[tuple[str, str], list[dict[str, float]]], names: list[str],
            workloads: list[str], counter: str, ref_s: float) -> dict[str, Any]:
    rows = []
    for workload in workloads:
        base = samples[("envoy-static", workload)]
        for name in names:
            got = samples[(name, workload)]
            row: dict[str, Any] = {"workload": workload, "target": name,
                                   "requests": int(sum(s["requests"] for s in got)),
                                   "errors": int(sum(s["errors"] for s in got))}
            for part in ("worker", "all"):
                mine = dp._median([s[f"{part}_per_request"] for s in got])
                theirs = dp._median([s[f"{part}_per_request"] for s in base])
                row[f"{part}_per_request"] = round(mine)
                row[f"{part}_x_static"] = round(theirs / mine, 3) if mine else None
            # Requests per CPU-second of the same runs, paired per round as dataplane.py does
            # (under callgrind: the instrumented process's CPU, a rougher view of the same).
            row["simulated_per_request"] = {
                event: round(dp._median([s[f"sim_{event}_per_request"] for s in got]))
                for event in SIMULATED if f"sim_{event}_per_request" in got[0]}
            row["per_cpu_s"] = round(dp._median([s["per_cpu_s"] for s in got]), 1)
            row["cpu_x_static"] = round(dp._median(
                [a["per_cpu_s"] / b["per_cpu_s"] for a, b in zip(got, base, strict=True)]), 3)
            rows.append(row)
    return {"reference_ms": round(ref_s * 1000, 1), "counter": counter,
            "load_average_end": dp.load_average(), "rows": rows}


def _print(report: dict[str, Any]) -> None:
    print(f"\ninstructions per request ({report['counter']}), median over rounds; x static = "
          "envoy-static's instructions per request / this one's (1.0: as cheap); per CPU-s: "
          "requests per CPU-second of the same Envoy process in the same runs, x static paired "
          "per round")
    head = (f"{'workload':<16} {'target':<34} {'requests':>9} {'worker/req':>11} "
            f"{'x static':>9} {'all/req':>10} {'x static':>9} {'per CPU-s':>10} "
            f"{'x static':>9} {'errors':>7}")
    print(head)
    print("-" * len(head))
    for row in report["rows"]:
        print(f"{row['workload']:<16} {row['target']:<34} {row['requests']:>9} "
              f"{row['worker_per_request']:>11,} {row['worker_x_static']:>9.3f} "
              f"{row['all_per_request']:>10,} {row['all_x_static']:>9.3f} "
              f"{row['per_cpu_s']:>10.0f} {row['cpu_x_static']:>9.3f} {row['errors']:>7}")
    simulated = [row for row in report["rows"] if row["simulated_per_request"]]
    if simulated:
        print("\nsimulated by callgrind (--cache-sim), worker thread, per request: " +
              ", ".join(SIMULATED))
        for row in simulated:
            print(f"{row['workload']:<16} {row['target']:<34} " + " ".join(
                f"{k}={v:,}" for k, v in row["simulated_per_request"].items()))


if __name__ == "__main__":
    main()
