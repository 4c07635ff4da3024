"""Secrets (SDS): one per TLS certificate, shared by every listener that serves it.

Keys travel only inside these resources: never in listeners, never in logs or golden dumps
(``podway.envoy.xds.dump`` redacts them).
"""

from __future__ import annotations

from envoy.extensions.transport_sockets.tls.v3 import secret_pb2

from podway.ir import TLSCertificate


def secret(cert: TLSCertificate) -> secret_pb2.Secret:
    out = secret_pb2.Secret(name=cert.name)
    out.tls_certificate.certificate_chain.inline_string = cert.cert_pem
    out.tls_certificate.private_key.inline_string = cert.key_pem
    return out
