"""TLS material from Secrets and ConfigMaps, checked as the engine would check it.

Envoy refuses a listener whose certificate or key it cannot load, and a refused listener takes
every host on it down. So a pair is parsed here with a real X.509 library before it reaches the
IR: the certificate chain must parse, the key must parse (unencrypted PKCS#1, PKCS#8 or SEC1), the
key must belong to the first certificate, and the key type must be one Envoy serves (RSA of
2048 bits or more, ECDSA on P-256, P-384 or P-521). A failure is an error on the object that
named the Secret, and only that Secret's hosts go without HTTPS. A certificate outside its
validity period is served but warned about (``CertificateNotCurrent``): rotating it is the fix,
and refusing it would turn an expiry warning into an outage.

Parsing costs milliseconds per pair, so results are cached by content: an unchanged Secret is
never parsed twice (``_check_pair``). The validity period is compared with the clock at each
translation, outside the cache; the clock is the one environment input of the translator, and
it only ever adds a warning.

The X.509 library is imported at the first pair or bundle to check, not with the translator: it
costs ~8 MiB of resident memory, which a controller serving no TLS never needs
(``bench/controller_memory.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from podway.ir import TLSCertificate
from podway.model import Secret
from podway.model.core import ConfigMap
from podway.model.snapshot import Snapshot
from podway.translate.core.problems import Reason, Verdict, quote

MIN_RSA_BITS = 2048
EC_CURVES = ("secp256r1", "secp384r1", "secp521r1")


@dataclass(frozen=True, slots=True)
class PairCheck:
    """What parsing one cert/key pair found; time-independent, so it can be cached."""

    error: str | None = None  # why the engine would refuse the pair
    not_before: datetime | None = None
    not_after: datetime | None = None


@dataclass(frozen=True, slots=True)
class SecretCertificate:
    """A Secret's certificate, or why it cannot be served; ``warning`` when served anyway."""

    certificate: TLSCertificate | None = None
    error: Verdict | None = None
    warning: Verdict | None = None


def certificate_from_secret(snapshot: Snapshot, namespace: str, name: str,
                            hostnames: tuple[str, ...],
                            now: datetime | None = None) -> SecretCertificate:
    """The certificate in Secret ``namespace/name`` for ``hostnames``, checked."""
    secret = snapshot.get(Secret, namespace, name)
    where = f"Secret {namespace}/{name}"
    if secret is None:
        return SecretCertificate(error=Verdict(False, Reason.SECRET_NOT_FOUND,
                                               f"{where} not found"))
    if secret.type != Secret.TLS_TYPE:
        return _invalid(f"{where} is of type {quote(secret.type)}, not '{Secret.TLS_TYPE}'")
    cert, key = secret.get("tls.crt"), secret.get("tls.key")
    if not cert or not key:
        missing = " and ".join(k for k, v in (("tls.crt", cert), ("tls.key", key)) if not v)
        return _invalid(f"{where} has no {missing}")
    check = _check_pair(cert, key)
    if check.error is not None:
        return _invalid(f"{where}: {check.error}")
    try:
        cert_pem, key_pem = cert.decode(), key.decode()
    except UnicodeDecodeError:  # PEM parsed, yet bytes around it are not text
        return _invalid(f"{where} holds bytes that are not PEM text")
    out = TLSCertificate(name=f"secret/{namespace}/{name}", hostnames=hostnames,
                         cert_pem=cert_pem, key_pem=key_pem, origin=secret.ref)
    return SecretCertificate(certificate=out, warning=_validity(where, check, now))


def pair_error(secret: Secret) -> str | None:
    """Why the engine could not serve ``secret`` as a certificate and key (None: it can):
    the checks of ``certificate_from_secret`` that do not depend on the clock."""
    if secret.type != Secret.TLS_TYPE:
        return f"it is of type {quote(secret.type)}, not '{Secret.TLS_TYPE}'"
    cert, key = secret.get("tls.crt"), secret.get("tls.key")
    if not cert or not key:
        return "it has no " + " and ".join(k for k, v in (("tls.crt", cert), ("tls.key", key))
                                           if not v)
    error = _check_pair(cert, key).error
    if error is None:
        try:
            cert.decode(), key.decode()
        except UnicodeDecodeError:
            return "it holds bytes that are not PEM text"
    return error


def _invalid(message: str) -> SecretCertificate:
    return SecretCertificate(error=Verdict(False, Reason.INVALID_SECRET, message))


def _validity(where: str, check: PairCheck, now: datetime | None) -> Verdict | None:
    now = now or datetime.now(UTC)
    if check.not_after is not None and now > check.not_after:
        return Verdict(False, Reason.CERTIFICATE_NOT_CURRENT,
                       f"{where}: the certificate expired at {check.not_after:%Y-%m-%dT%H:%M:%SZ}; "
                       "clients will refuse it")
    if check.not_before is not None and now < check.not_before:
        return Verdict(False, Reason.CERTIFICATE_NOT_CURRENT,
                       f"{where}: the certificate is not valid before "
                       f"{check.not_before:%Y-%m-%dT%H:%M:%SZ}; clients will refuse it")
    return None


@lru_cache(maxsize=4096)
def _check_pair(cert: bytes, key: bytes) -> PairCheck:
    """Parse a certificate chain and its private key and check they belong together."""
    from cryptography import x509  # lazily: see the module docstring
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        chain = x509.load_pem_x509_certificates(cert)
    except ValueError:
        return PairCheck(error="tls.crt holds no valid PEM certificate")
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except TypeError:
        return PairCheck(error="tls.key is encrypted; the engine needs an unencrypted key")
    except (ValueError, UnsupportedAlgorithm):
        return PairCheck(error="tls.key holds no valid PEM private key")
    leaf = chain[0]
    if isinstance(private, rsa.RSAPrivateKey):
        if private.key_size < MIN_RSA_BITS:
            return PairCheck(error=f"tls.key is RSA {private.key_size} bits; the engine needs "
                                   f"{MIN_RSA_BITS} or more")
    elif isinstance(private, ec.EllipticCurvePrivateKey):
        if private.curve.name not in EC_CURVES:
            return PairCheck(error=f"tls.key uses curve {private.curve.name}; the engine "
                                   "serves P-256, P-384 and P-521")
    else:
        return PairCheck(error="tls.key is neither RSA nor ECDSA; the engine serves those two")
    try:
        leaf_key = leaf.public_key().public_bytes(*spki)
    except (ValueError, UnsupportedAlgorithm):
        return PairCheck(error="the certificate's public key cannot be read")
    if leaf_key != private.public_key().public_bytes(*spki):
        return PairCheck(error="tls.key does not belong to the certificate in tls.crt "
                               "(mismatched pair)")
    return PairCheck(not_before=leaf.not_valid_before_utc, not_after=leaf.not_valid_after_utc)


def ca_bundle(snapshot: Snapshot, namespace: str, group: str, kind: str,
              name: str) -> str | Verdict:
    """The PEM CA bundle (key ``ca.crt``) of a ConfigMap or Secret, or why it is unusable."""
    if group == "" and kind == "ConfigMap":
        cm = snapshot.get(ConfigMap, namespace, name)
        text = cm.data.get("ca.crt") if cm is not None else None
    elif group == "" and kind == "Secret":
        secret = snapshot.get(Secret, namespace, name)
        raw = secret.get("ca.crt") if secret is not None else None
        text = raw.decode(errors="replace") if raw is not None else None
    else:
        return Verdict(False, Reason.INVALID_KIND,
                       f"caCertificateRef kind {quote(kind)} is not supported")
    if text is None:
        return Verdict(False, Reason.INVALID_CA_CERTIFICATE_REF,
                       f"{kind} {namespace}/{name} has no ca.crt")
    if not _valid_bundle(text):
        return Verdict(False, Reason.INVALID_CA_CERTIFICATE_REF,
                       f"{kind} {namespace}/{name} ca.crt holds no valid PEM certificate")
    return text


@lru_cache(maxsize=1024)
def _valid_bundle(text: str) -> bool:
    from cryptography import x509  # lazily: see the module docstring

    try:
        return bool(x509.load_pem_x509_certificates(text.encode()))
    except ValueError:
        return False
