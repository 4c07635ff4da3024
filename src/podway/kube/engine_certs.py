"""A self-managed CA for engine client certificates, issued through the Kubernetes CSR API
(issue 23.10): the rules and the certificates, no I/O.

The design: the controller keeps a CA (a Secret it creates when missing) and signs the
``certificates.k8s.io/v1`` CertificateSigningRequests of signer ``SIGNER``. A request is
granted only when the API server stamped it as one of the engine service accounts (each engine
group runs as its own: ``users`` maps a user to its group) with one node name in ``spec.extra``
(a bound token, Kubernetes 1.30+), and its PKCS#10 subject asks exactly for that node as CN and
that group as O (``podway.io/engine-group=<group>``). The certificate then names only that node
and group, which is what the xDS server's identity check (``podway.engines.identity``) lets an
engine claim: an engine can no longer pose as another node or group.

``podway.programs.controller.engine_certs`` answers the requests. Not done yet (see
docs/security.md, "Identities"): starting it from ``podway controller``, the engine asking at
start, and the chart using it by default.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from podway.kube.npl_keys import NODE_EXTRA
from podway.model.base import ENGINE_GROUP

SIGNER = "podway.io/engine-client"
GROUP_PREFIX = ENGINE_GROUP + "="  # an O value naming an engine group (podway.engines.identity)
CA_DAYS = 3650
CERT_DAYS = 365


def new_ca(name: str = "podway engine CA") -> tuple[bytes, bytes]:
    """A new self-signed CA: (certificate PEM, private key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def engine_request(private_key: ec.EllipticCurvePrivateKey, *, node: str, group: str) -> bytes:
    """The PKCS#10 request an engine makes: CN = its node, O = its group."""
    names = [x509.NameAttribute(NameOID.COMMON_NAME, node)]
    if group:
        names.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, GROUP_PREFIX + group))
    return x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names)).sign(
        private_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def granted(obj: Mapping[str, Any], *, users: Mapping[str, str]
            ) -> tuple[tuple[str, str] | None, str]:
    """(node, group) a request may get a certificate for, or None and why not."""
    spec = obj.get("spec") or {}
    if spec.get("signerName") != SIGNER:
        return None, f"signer is not {SIGNER}"
    user = str(spec.get("username", ""))
    if user not in users:
        return None, f"requested by {user!r}, not an engine service account"
    group = users[user]
    nodes = (spec.get("extra") or {}).get(NODE_EXTRA) or []
    if not isinstance(nodes, list) or len(nodes) != 1 or not isinstance(nodes[0], str) \
            or not nodes[0]:
        return None, f"the requester's token names no node ({NODE_EXTRA})"
    try:
        csr = x509.load_pem_x509_csr(base64.b64decode(str(spec.get("request", "")),
                                                      validate=True))
    except ValueError as exc:
        return None, f"not a PEM certificate request: {exc}"
    if not csr.is_signature_valid:
        return None, "the request's signature does not match its key"
    cns = [str(a.value) for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if cns != [nodes[0]]:
        return None, f"asks for node(s) {cns} but the requester runs on {nodes[0]!r}"
    orgs = [str(a.value) for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if orgs != ([GROUP_PREFIX + group] if group else []):
        return None, f"asks for O {orgs} but {user} serves engine group {group!r}"
    try:
        csr.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        pass
    else:
        return None, "asks for subject alternative names: only the node (CN) is granted"
    return (nodes[0], group), ""


def sign(obj: Mapping[str, Any], ca_cert_pem: bytes, ca_key_pem: bytes, *, node: str,
         group: str, days: int = CERT_DAYS) -> bytes:
    """The client certificate for a granted request: CN and DNS name = node, O = group."""
    csr = x509.load_pem_x509_csr(base64.b64decode(str(obj["spec"]["request"])))
    ca = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the engine CA key is not an EC key")
    names = [x509.NameAttribute(NameOID.COMMON_NAME, node)]
    if group:
        names.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, GROUP_PREFIX + group))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name(names)).issuer_name(ca.subject)
            .public_key(csr.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)
