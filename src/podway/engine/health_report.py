"""The engine's side of member health: what its Envoy thinks of each member, sent to the controller.

``podway engine`` runs a ``Reporter`` beside Envoy. Every ``interval_s`` it reads Envoy's admin
``/clusters`` (the health flags of every host of every pool), reduces each host to
healthy / pending / unhealthy (``classify``) and, when anything changed, sends the change on
one long-lived gRPC stream to the controller (``podway.xds.member_health``), over the same
address, TLS and client certificate as xDS. The controller's readiness gate turns the reports
of all engines into each gated Pod's ``podway.io/lb-ready`` condition.

Invariants:

* A stream starts with the whole view (``full``), so a controller that restarted, or a stream
  that broke, never combines news with a view it did not see; later messages carry changes only.
  Nothing is sent before Envoy's admin first answers: "never reported" stays distinguishable
  from "reported no hosts".
* The Kubernetes readiness Envoy was told (EDS health status) is ignored: the gate itself moves
  it, so counting it would lock a gated pod out for good. Health is what Envoy measured.
* Envoy's admin not answering keeps the last view (Envoy restarting is seen as its hosts
  turning pending once it answers again); a broken stream is opened again with backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import grpc

from podway.backoff import Backoff
from podway.engine import admin
from podway.xds.member_health import PATH, Health, HostKey, HostState, Message, diff, encode

log = logging.getLogger(__name__)

View = Mapping[HostKey, HostState]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportOptions:
    """Where and how often to report; TLS settings as the engine's xDS connection."""

    node_id: str
    xds: str  # "host:port" or "unix:/path": the controller's xDS address
    ca_pem: str | None = None  # set: TLS, verifying the controller's certificate
    sni: str = ""  # name to verify (default: the host of ``xds``)
    client_cert_pem: str | None = None
    client_key_pem: str | None = None
    interval_s: float = 2.0  # between two reads of Envoy's admin; each costs one /clusters dump
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=10.0))


# Envoy's text ``/clusters`` flag names → the JSON names ``classify`` reads.
_FLAGS = {"failed_active_hc": "failed_active_health_check",
          "failed_outlier_check": "failed_outlier_check",
          "degraded_active_hc": "failed_active_degraded_check",
          "pending_active_hc": "pending_active_hc",
          "excluded_via_immediate_hc_fail": "excluded_via_immediate_hc_fail",
          "active_hc_timeout": "active_hc_timeout"}
_MARK = "::health_flags::"


def classify(flags: Mapping[str, Any]) -> HostState:
    """One host's health flags (named as in the JSON ``/clusters``' ``health_status``) →
    its health. EDS status, the Kubernetes readiness Podway itself sent, is ignored: see the
    module docstring."""
    if flags.get("pending_active_hc"):
        return HostState(Health.PENDING, "waiting for its first health check")
    if flags.get("failed_active_health_check"):
        why = " (timeout)" if flags.get("active_hc_timeout") else ""
        return HostState(Health.UNHEALTHY, f"failed active health check{why}")
    if flags.get("failed_outlier_check"):
        return HostState(Health.UNHEALTHY, "ejected by outlier detection")
    if flags.get("excluded_via_immediate_hc_fail"):
        return HostState(Health.UNHEALTHY, "answered an immediate health check failure")
    return HostState(Health.HEALTHY)


def parse(body: str) -> View:
    """Envoy's text ``/clusters`` → (pool, "address:port") → health; other lines are skipped.

    Only the ``<cluster>::<host>::health_flags::<flags>`` lines matter (``healthy``, or flags
    like ``/failed_active_hc/pending_active_hc``), so they are found by substring search
    instead of parsing the whole answer: ``json.loads`` of the JSON form costs ~4x more per
    look at 4,000 pools (``bench/health_report.py``). An IPv6 host
    ``[a::b]:port`` becomes ``a::b:port``, as the controller names members.
    """
    out: dict[HostKey, HostState] = {}
    at = body.find(_MARK)
    while at >= 0:
        line_start = body.rfind("\n", 0, at) + 1
        line_end = body.find("\n", at)
        line_end = len(body) if line_end < 0 else line_end
        cluster, sep, host = body[line_start:at].partition("::")
        if sep and host:
            if host.startswith("["):
                address, _, port = host[1:].partition("]:")
                host = f"{address}:{port}"
            names = body[at + len(_MARK):line_end].strip().split("/")
            out[(cluster, host)] = classify({_FLAGS[n]: True for n in names if n in _FLAGS})
        at = body.find(_MARK, line_end)
    return MappingProxyType(out)


async def read_view(address: str, *, limit_s: float = 5.0) -> View | None:
    """The engine's view now; None when its admin does not answer well."""
    try:
        status, body = await admin.request(address, "/clusters", limit_s=limit_s)
    except (OSError, TimeoutError):
        return None
    if status != 200:
        return None
    return await asyncio.to_thread(parse, body)  # megabytes with thousands of pools


class Reporter:
    """Streams this engine's member health to the controller until cancelled."""

    def __init__(self, opts: ReportOptions, admin_address: Callable[[], str | None]) -> None:
        self.opts = opts
        self.admin_address = admin_address
        self.sent = 0  # messages sent (all streams)

    async def run(self) -> None:
        failures = 0
        last_error = ""
        while True:
            streamed = [False]
            try:
                async with self._channel() as channel:
                    call = channel.stream_unary(PATH)(self._messages(streamed))
                    await call
            except grpc.aio.AioRpcError as exc:
                error = f"{exc.code().name}: {exc.details()}"
                # The same refusal again says nothing new.
                log.log(logging.WARNING if error != last_error else logging.DEBUG,
                        "member health reports to %s failed: %s", self.opts.xds, error)
                last_error = error
            failures = 1 if streamed[0] else failures + 1
            await asyncio.sleep(self.opts.backoff.delay(failures))

    async def _messages(self, streamed: list[bool]) -> AsyncIterator[bytes]:
        sent: View | None = None
        while True:
            address = self.admin_address()
            view = await read_view(address) if address is not None else None
            if view is not None:
                if sent is None:
                    message = Message(node=self.opts.node_id, full=True, hosts=view)
                else:
                    changed, removed = diff(sent, view)
                    message = Message(node=self.opts.node_id, full=False,
                                      hosts=MappingProxyType(changed), removed=removed)
                if sent is None or message.hosts or message.removed:
                    yield encode(message)
                    self.sent += 1
                    streamed[0] = True
                sent = view
            await asyncio.sleep(self.opts.interval_s)

    def _channel(self) -> grpc.aio.Channel:
        opts = self.opts
        if opts.ca_pem is None:
            return grpc.aio.insecure_channel(opts.xds)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=opts.ca_pem.encode(),
            private_key=opts.client_key_pem.encode() if opts.client_key_pem else None,
            certificate_chain=opts.client_cert_pem.encode() if opts.client_cert_pem else None)
        options = [("grpc.ssl_target_name_override", opts.sni)] if opts.sni else []
        return grpc.aio.secure_channel(opts.xds, credentials, options=options)
