"""Each NodePortLocal agent gets its own node's signing key from the controller (issue 23.9).

The controller holds the master key; the agent of node N signs with ``npl.node_key(master, N)``.
Mounting the master on every node would let root on any node sign for all of them (the kubelet
of a node can read every Secret its pods mount), so the agent asks for its key instead, through
the API server, which is the one party that knows who asks:

1. the agent makes a P-256 key pair in memory and creates a ``certificates.k8s.io/v1``
   CertificateSigningRequest with signer ``SIGNER`` whose PKCS#10 request (CN = its node)
   carries the public key. The API server stamps ``spec.username`` and ``spec.extra`` with the
   requester's identity; nobody can set them. A bound service account token (every pod's,
   Kubernetes 1.30+) puts the pod's node in ``extra[NODE_EXTRA]``;
2. the controller (``requester_node``) accepts only the agent's service account, with one node
   in ``extra`` equal to the request's CN, and writes that node's key sealed to the request's
   public key (``seal``: ECDH with a one-time key, HKDF-SHA256, AES-GCM) in the annotation
   ``SEALED_ANNOTATION`` of the request; a refused request gets ``REFUSED_ANNOTATION``;
3. the agent opens the seal with its private key (``open_sealed``), which never leaves the
   process. Whoever reads the request learns nothing; whoever rewrites the annotation can only
   make the agent fail (AES-GCM authenticates it), not hand it another node's key.

Pure functions (no I/O): the agent's and the controller's loops use them.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import NameOID

SIGNER = "podway.io/npl-key"
SEALED_ANNOTATION = "podway.io/npl-key-sealed"
REFUSED_ANNOTATION = "podway.io/npl-key-refused"
NODE_EXTRA = "authentication.kubernetes.io/node-name"
_VERSION = "v1"
_INFO = b"podway-npl-key/v1"


class SealError(ValueError):
    """A request or a sealed key that cannot be used (one line)."""


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def request_pem(private_key: ec.EllipticCurvePrivateKey, node: str) -> bytes:
    """The PKCS#10 request an agent sends: CN = its node, signed with its one-time key."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(
        private_key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM)


def csr_object(private_key: ec.EllipticCurvePrivateKey, node: str) -> dict[str, Any]:
    """The CertificateSigningRequest object the agent of ``node`` creates."""
    request = base64.b64encode(request_pem(private_key, node)).decode()
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": f"podway-npl-{node[:40]}-"},
            "spec": {"signerName": SIGNER, "request": request,
                     "usages": ["digital signature"]}}


def _parsed_request(pem: bytes) -> x509.CertificateSigningRequest:
    try:
        csr = x509.load_pem_x509_csr(pem)
    except ValueError as exc:
        raise SealError(f"not a PEM certificate request: {exc}") from None
    if not csr.is_signature_valid:
        raise SealError("the request's signature does not match its key")
    return csr


def requester_node(obj: dict[str, Any], *, agent_user: str) -> tuple[str | None, str]:
    """The node whose key a request may receive, or None and why not. The requester (stamped
    by the API server) must be ``agent_user`` with exactly one node name in its extra info,
    the same node its request names (CN)."""
    spec = obj.get("spec") or {}
    if spec.get("signerName") != SIGNER:
        return None, f"signer is not {SIGNER}"
    if spec.get("username") != agent_user:
        return None, f"requested by {spec.get('username')!r}, not the agent ({agent_user})"
    nodes = (spec.get("extra") or {}).get(NODE_EXTRA) or []
    if not isinstance(nodes, list) or len(nodes) != 1 or not isinstance(nodes[0], str) \
            or not nodes[0]:
        return None, (f"the requester's token names no node ({NODE_EXTRA}; a bound service "
                      "account token of Kubernetes 1.30+ does)")
    try:
        csr = _parsed_request(base64.b64decode(str(spec.get("request", "")), validate=True))
    except (SealError, ValueError) as exc:
        return None, str(exc)
    names = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    asked = str(names[0].value) if len(names) == 1 else ""
    if asked != nodes[0]:
        return None, f"asks for node {asked!r} but the requester runs on {nodes[0]!r}"
    return nodes[0], ""


def _derive(shared: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(shared)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(request: str, secret: bytes) -> str:
    """``secret`` encrypted to the public key of ``request`` (the object's base64 PEM)."""
    csr = _parsed_request(base64.b64decode(request, validate=True))
    public = csr.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey) or \
            not isinstance(public.curve, ec.SECP256R1):
        raise SealError("the request's key is not a P-256 key")
    one_time = ec.generate_private_key(ec.SECP256R1())
    key = _derive(one_time.exchange(ec.ECDH(), public))
    nonce = os.urandom(12)
    sealed = AESGCM(key).encrypt(nonce, secret, _INFO)
    point = one_time.public_key().public_bytes(serialization.Encoding.X962,
                                               serialization.PublicFormat.UncompressedPoint)
    return ".".join((_VERSION, _b64(point), _b64(nonce), _b64(sealed)))


def open_sealed(private_key: ec.EllipticCurvePrivateKey, sealed: str) -> bytes:
    """The secret ``seal`` sealed to ``private_key``'s public key."""
    parts = sealed.split(".")
    if len(parts) != 4 or parts[0] != _VERSION:
        raise SealError("not a sealed key of this version")
    try:
        point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), _unb64(parts[1]))
        key = _derive(private_key.exchange(ec.ECDH(), point))
        return AESGCM(key).decrypt(_unb64(parts[2]), _unb64(parts[3]), _INFO)
    except Exception as exc:  # a bad point, a bad tag, bad base64: all one refusal
        raise SealError(f"the sealed key does not open with this agent's key "
                        f"({type(exc).__name__})") from None
