"""TLS certificates from ``kubernetes.io/tls`` Secrets."""

from __future__ import annotations

from podway.ir import TLSCertificate
from podway.model import Secret
from podway.model.snapshot import Snapshot


def certificate_from_secret(snapshot: Snapshot, namespace: str, name: str,
                            hostnames: tuple[str, ...]) -> TLSCertificate | str:
    """The certificate in Secret ``namespace/name``, or why there is none (for a problem)."""
    secret = snapshot.get(Secret, namespace, name)
    if secret is None:
        return f"Secret {namespace}/{name} not found"
    if secret.type != Secret.TLS_TYPE:
        return f"Secret {namespace}/{name} is of type {secret.type!r}, not {Secret.TLS_TYPE!r}"
    cert, key = secret.get("tls.crt"), secret.get("tls.key")
    if not cert or not key:
        missing = " and ".join(k for k, v in (("tls.crt", cert), ("tls.key", key)) if not v)
        return f"Secret {namespace}/{name} has no {missing}"
    try:
        cert_pem, key_pem = cert.decode(), key.decode()
    except UnicodeDecodeError:
        return f"Secret {namespace}/{name} does not hold PEM text"
    if "-----BEGIN" not in cert_pem or "-----BEGIN" not in key_pem:
        return f"Secret {namespace}/{name} does not hold PEM data in tls.crt/tls.key"
    return TLSCertificate(name=f"secret/{namespace}/{name}", hostnames=hostnames,
                          cert_pem=cert_pem, key_pem=key_pem, origin=secret.ref)
