"""Certificates as a crt-list: one PEM (certificate + key) per IR certificate, SNI filters.

The first row is the default certificate (a certificate without hostnames, else the first);
HAProxy picks the row whose SNI filter matches the client's name, exact before wildcard. Key
files are written 0600 by the supervisor.
"""

from __future__ import annotations

from dataclasses import dataclass

from podway.haproxy.names import Unquotable, word
from podway.haproxy.report import Unsupported
from podway.ir import Listener, TLSCertificate

_VERSIONS = {"1.0": "TLSv1.0", "1.1": "TLSv1.1", "1.2": "TLSv1.2", "1.3": "TLSv1.3"}
# Every bind's TLS 1.3 suites (``ssl-default-bind-ciphersuites``): OpenSSL's default three, in
# the order BoringSSL (Envoy) uses where AES runs in hardware.
TLS13_SUITES = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"


@dataclass(frozen=True, slots=True, kw_only=True)
class CrtList:
    path: str  # absolute
    files: tuple[tuple[str, str], ...]
    unsupported: tuple[Unsupported, ...]


def crt_list(listener: Listener, fe: str, folder: str,
             certificates: tuple[TLSCertificate, ...] | None = None) -> CrtList:
    certs = listener.certificates if certificates is None else certificates
    ordered = sorted(certs, key=lambda c: bool(c.hostnames))  # the default first (stable)
    files: list[tuple[str, str]] = []
    rows: list[str] = []
    report: list[Unsupported] = []
    for cert in ordered:
        pem = f"certs/{cert.fingerprint}.pem"
        files.append((pem, cert.cert_pem.rstrip("\n") + "\n" + cert.key_pem.rstrip("\n") + "\n"))
        opts: list[str] = []
        o = cert.options
        if o.min_version:
            opts.append(f"ssl-min-ver {_VERSIONS[o.min_version]}")
        if o.max_version:
            opts.append(f"ssl-max-ver {_VERSIONS[o.max_version]}")
        try:
            if o.ciphers:
                opts.append(f"ciphers {word(':'.join(o.ciphers))}")
        except Unquotable:
            report.append(Unsupported(subject=cert.name, feature="this cipher list",
                                      origin=cert.origin))
        if o.client_ca_pem:
            ca = f"certs/ca-{cert.fingerprint}.pem"
            files.append((ca, o.client_ca_pem))
            opts.append(f"ca-file {folder}/{ca}")
            opts.append("verify " + ("required" if o.client_required else "optional"))
            if o.client_verify_depth is not None:
                report.append(Unsupported(subject=cert.name, origin=cert.origin,
                                          feature="a client certificate chain depth limit"))
            if o.client_accept_untrusted:  # stricter, not looser: an untrusted one is refused
                report.append(Unsupported(subject=cert.name, origin=cert.origin,
                                          feature="accepting an untrusted client certificate "
                                          "(AllowInsecureFallback: only a missing one is let "
                                          "through)"))
        if any(h.startswith("*.") for h in cert.hostnames):
            # HAProxy's crt-list wildcard covers one label; Envoy's server names any number.
            report.append(Unsupported(subject=cert.name, origin=cert.origin,
                                      feature="a wildcard SNI name for names of several labels "
                                      "(HAProxy's covers one: a.b.<domain> gets the default "
                                      "certificate)"))
        bracket = f" [{' '.join(opts)}]" if opts else ""
        names = "".join(f" {h}" for h in cert.hostnames)
        rows.append(f"{folder}/{pem}{bracket}{names}")
    path = f"certs/{fe}.crtlist"
    files.append((path, "".join(r + "\n" for r in rows)))
    return CrtList(path=f"{folder}/{path}", files=tuple(files), unsupported=tuple(report))
