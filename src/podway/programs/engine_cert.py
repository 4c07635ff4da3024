"""An engine asks for its own xDS client certificate (issue 23.10): ``podway engine`` with TLS
to the controller (``--xds-ca``) and no ``--xds-client-cert``/``--xds-client-key`` files.

At start it generates a private key here (it never leaves the pod: only the PKCS#10 request
goes to the API), creates a CertificateSigningRequest of signer ``podway.io/engine-client``
naming its node (CN) and engine group (O ``podway.io/engine-group=<group>``), and waits for the
controller (``podway.programs.controller.engine_certs``) to approve and sign it. The API server
stamps who asked; the controller grants only the requester's own node (from its bound token)
and its service account's group, and denies anything else with a reason, which stops the
engine with that reason (it could fetch nothing).

The key and the certificate are written 0600 in the engine's private state folder
(``engine-client.key``, ``engine-client.crt``), and the pair as a file-based SDS resource
(``engine-client-sds.json``) Envoy's bootstrap reads the xDS client certificate from. A
restarted engine reuses them while they name the same node and group and have more than a third
of their lifetime left; otherwise it asks again. A running engine renews two thirds into the
certificate's life (``keep_renewed``): a new key, a new request, the files and the SDS
resource replaced. Envoy watches the SDS file and switches for its next connections; the IR
stream of HAProxy and kernel engines and every engine's member health reports read the files at
each new connection (``ReportOptions.client_files``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.base.errors import EnvironmentProblem
from podway.engines.identity import from_pem
from podway.envoy.engine.bootstrap import XDS_CLIENT_SECRET
from podway.kube import csr_wait, engine_certs

log = logging.getLogger(__name__)

CERT_FILE = "engine-client.crt"
KEY_FILE = "engine-client.key"
SDS_FILE = "engine-client-sds.json"  # the same pair as an SDS resource Envoy watches
SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"


@dataclass(frozen=True, slots=True)
class ClientCert:
    cert_pem: str
    key_pem: str
    cert_path: Path
    key_path: Path


def request_object(private_key: ec.EllipticCurvePrivateKey, *, node: str, group: str
                   ) -> dict[str, Any]:
    """The CertificateSigningRequest an engine of ``node`` and ``group`` creates."""
    pem = engine_certs.engine_request(private_key, node=node, group=group)
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": f"podway-engine-{node[:40]}-"},
            "spec": {"signerName": engine_certs.SIGNER, "usages": ["client auth",
                                                                  "digital signature"],
                     "request": base64.b64encode(pem).decode()}}


def reusable(folder: Path, *, node: str, group: str, now: float | None = None
             ) -> ClientCert | None:
    """The certificate already in ``folder`` when it names ``node``/``group`` and has more than
    a third of its lifetime left; None otherwise (then ask again)."""
    cert_path, key_path = folder / CERT_FILE, folder / KEY_FILE
    try:
        cert_pem, key_pem = cert_path.read_text(), key_path.read_text()
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (OSError, ValueError):
        return None
    if key.public_key() != cert.public_key():
        return None
    identity = from_pem(cert_pem.encode())
    if identity.refusal(node=node, group=group) is not None or \
            identity.groups != (frozenset({group}) if group else frozenset()):
        return None
    start, end = cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()
    if (now or time.time()) > end - (end - start) / 3:
        return None
    return ClientCert(cert_pem, key_pem, cert_path, key_path)


def _write_private(path: Path, text: str) -> None:
    """``text`` to ``path``, 0600 from its first byte, replacing it at once."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(text)
    os.replace(tmp, path)


async def obtain(api: client.ApiClient, folder: Path, *, node: str, group: str,
                 poll_s: float = 1.0, backoff: Backoff | None = None, renew: bool = False
                 ) -> ClientCert:
    """This engine's client certificate: the one in ``folder`` if still good (unless
    ``renew``), else a new one the controller signed (waits for it; a denial raises
    ``EnvironmentProblem``)."""
    found = None if renew else reusable(folder, node=node, group=group)
    if found is not None:
        log.info("event=engine-certificate-reused node=%s group=%s", node, group or "-")
        return found
    private = ec.generate_private_key(ec.SECP256R1())
    certs: Any = client.CertificatesV1Api(api)
    name = await csr_wait.create(certs, request_object(private, node=node, group=group),
                                 backoff or Backoff(base=1.0, cap=30.0), log=log,
                                 event="engine-certificate-request-failed")
    log.info("event=engine-certificate-requested csr=%s node=%s group=%s", name, node,
             group or "-")
    cert_pem = await csr_wait.answered(
        certs, name, _answer(name), poll_s=poll_s, log=log, prefix="engine-certificate",
        hint="is a controller with --engine-account for this service account running?")
    key_pem = private.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    if cert.public_key() != private.public_key():
        raise EnvironmentProblem(f"engine certificate request {name}: the certificate issued "
                                 "is not for this engine's key")
    key_path, cert_path = folder / KEY_FILE, folder / CERT_FILE
    _write_private(key_path, key_pem)
    _write_private(cert_path, cert_pem)
    log.info("event=engine-certificate-issued csr=%s node=%s group=%s until=%s", name, node,
             group or "-", cert.not_valid_after_utc.isoformat())
    return ClientCert(cert_pem, key_pem, cert_path, key_path)


def _answer(name: str) -> Callable[[dict[str, Any]], str | None]:
    """The PEM certificate once the request has one; raises on a denial or a failure."""
    def answer(found: dict[str, Any]) -> str | None:
        status = found.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Denied", "Failed") and \
                    condition.get("status", "True") == "True":
                raise EnvironmentProblem(
                    f"the controller refused this engine a certificate ({name}): "
                    f"{condition.get('message') or condition.get('reason') or 'no reason'}")
        if not status.get("certificate"):
            return None
        try:
            return base64.b64decode(str(status["certificate"]), validate=True).decode()
        except ValueError as exc:
            raise EnvironmentProblem(f"engine certificate request {name}: unreadable "
                                     f"certificate ({exc})") from None
    return answer


def renew_at(cert_pem: str) -> float:
    """When a certificate is renewed (epoch seconds): two thirds into its life."""
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    start, end = cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()
    return end - (end - start) / 3


def write_sds(folder: Path, cert: ClientCert) -> Path:
    """The pair as a file-based SDS resource (0600; Envoy re-reads it when it is replaced)."""
    resource = {"@type": SECRET_TYPE, "name": XDS_CLIENT_SECRET, "tls_certificate": {
        "certificate_chain": {"inline_string": cert.cert_pem},
        "private_key": {"inline_string": cert.key_pem}}}
    path = folder / SDS_FILE
    _write_private(path, json.dumps({"resources": [resource]}))
    return path


async def keep_renewed(connect: Callable[[], Awaitable[client.ApiClient]], folder: Path,
                       current: ClientCert, *, node: str, group: str,
                       on_renewed: Callable[[ClientCert], None],
                       clock: Callable[[], float] = time.time,
                       backoff: Backoff | None = None) -> None:
    """Renew ``current`` two thirds into its life, for ever: a new key and request, the files
    and the SDS resource replaced (Envoy switches to it), then ``on_renewed``. A failed try is
    logged and tried again with ``backoff``; a denial too (the old certificate still serves
    until it expires)."""
    retry = backoff or Backoff(base=5.0, cap=300.0)
    failures = 0
    while True:
        await asyncio.sleep(max(0.0, renew_at(current.cert_pem) - clock()))
        try:
            api = await connect()
            async with api:
                current = await obtain(api, folder, node=node, group=group, renew=True)
        except (EnvironmentProblem, OSError) as exc:
            failures += 1
            await csr_wait.pause(log, "engine-certificate-renewal-failed", exc, retry, failures)
            continue
        failures = 0
        write_sds(folder, current)
        log.info("event=engine-certificate-renewed node=%s group=%s", node, group or "-")
        on_renewed(current)
