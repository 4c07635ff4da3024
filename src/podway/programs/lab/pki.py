"""The lab's certificates and credentials, as a cluster's installer makes them: one lab CA
(``pki/ca.crt``), the API server's serving certificate signed by it for every name a client
uses (127.0.0.1 from the host, the API's address inside the lab, the ``kubernetes`` Service's
ClusterIP and DNS names), the administrator's bearer token and the key ServiceAccount tokens
are signed with (so tokens outlive a control-plane restart). ``issue`` signs more (the
install's xDS certificates).

Invariants: everything is under ``<state>/pki/`` (0700, files 0600 but the CA certificate), made
once by ``ensure`` and read by every later start; keys never leave that folder except through
the emulator's SSL context.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from podway.kube.engine_certs import new_ca
from podway.programs.lab.plan import API_IP, KUBERNETES_IP

API_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local")
API_IPS = ("127.0.0.1", API_IP, KUBERNETES_IP)
DAYS = 365


def issue(ca_cert_pem: bytes, ca_key_pem: bytes, *, cn: str, dns: tuple[str, ...] = (),
          ips: tuple[str, ...] = (), server: bool = True, client: bool = False,
          organization: str = "") -> tuple[bytes, bytes]:
    """A certificate signed by the CA: (certificate PEM, new EC P-256 key PEM)."""
    ca = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the lab CA key is not an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if organization:
        names.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    usages = [*([ExtendedKeyUsageOID.SERVER_AUTH] if server else []),
              *([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])]
    alt: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    alt += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(x509.Name(names))
               .issuer_name(ca.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=DAYS))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


@dataclass(frozen=True, slots=True)
class LabPki:
    folder: Path

    def ensure(self) -> LabPki:
        """Make what is missing (a new lab: everything); keep what exists."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.ca_cert.exists():
            cert, key = new_ca("podway lab CA")
            _write(self.ca_key, key)
            _write(self.ca_cert, cert, 0o644)
        if not self.api_cert.exists():
            cert, key = issue(self.ca_cert.read_bytes(), self.ca_key.read_bytes(),
                              cn="kube-apiserver", dns=API_NAMES, ips=API_IPS)
            _write(self.api_key, key)
            _write(self.api_cert, cert)
        if not self.admin_token_file.exists():
            _write(self.admin_token_file, f"podway-lab-admin.{secrets.token_urlsafe(24)}"
                   .encode())
        if not self.token_key_file.exists():
            _write(self.token_key_file, secrets.token_bytes(32))
        return self

    @property
    def ca_cert(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def api_cert(self) -> Path:
        return self.folder / "apiserver.crt"

    @property
    def api_key(self) -> Path:
        return self.folder / "apiserver.key"

    @property
    def admin_token_file(self) -> Path:
        return self.folder / "admin.token"

    @property
    def token_key_file(self) -> Path:
        return self.folder / "sa-token.key"

    @property
    def admin_token(self) -> str:
        return self.admin_token_file.read_text().strip()

    def serving(self) -> tuple[bytes, bytes, bytes]:
        """(certificate, key, CA) for ``KubeEmulator(certificate=…)``."""
        return self.api_cert.read_bytes(), self.api_key.read_bytes(), self.ca_cert.read_bytes()
