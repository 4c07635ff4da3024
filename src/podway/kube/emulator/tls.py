"""A serving certificate for the emulator, made on the spot: kubectl sends a bearer token only
over TLS (client-go drops credentials on plain HTTP), so RBAC for ServiceAccount tokens needs
the emulator on HTTPS. Self-signed (it is its own CA), for 127.0.0.1 and localhost, ECDSA P-256;
the private key never leaves memory except through a private temporary file while the SSL
context loads it."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def serving_context(host: str = "127.0.0.1") -> tuple[ssl.SSLContext, bytes]:
    """An SSL server context and the certificate's PEM (what clients trust)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "podway-kube-emulator")])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return context_of(cert_pem, key_pem), cert_pem


def context_of(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """An SSL server context serving a given certificate (chain) and key (the lab's own,
    signed by its CA)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as folder:
        cert_file, key_file = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert_file.write_bytes(cert_pem)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key_pem)
        context.load_cert_chain(cert_file, key_file)
    return context
