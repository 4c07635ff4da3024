"""Fixed test certificates (ECDSA P-256, self-signed); keys are public test data.

Generated once with ``cryptography`` (deterministic keys); GOOD and OTHER are valid 2020-2120,
EXPIRED ended 2021-01-01. ``MISMATCHED_KEY`` is OTHER's key, which does not belong to GOOD.
"""

from __future__ import annotations

import json

GOOD_CERT = """\
-----BEGIN CERTIFICATE-----
MIIBNzCB3qADAgECAgID6TAKBggqhkjOPQQDAjAWMRQwEgYDVQQDDAtleGFtcGxl
LmNvbTAgFw0yMDAxMDEwMDAwMDBaGA8yMTIwMDEwMTAwMDAwMFowFjEUMBIGA1UE
AwwLZXhhbXBsZS5jb20wWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAATM96h75coW
6sAIkj2rHii4EjEFqjzNmRhwUiLKXTp8xrsnLqjlUwj5AlLJai6Va+i2NuV44y02
Y/9bb/5enWyyoxowGDAWBgNVHREEDzANggtleGFtcGxlLmNvbTAKBggqhkjOPQQD
AgNIADBFAiAQ/4sdGpIdilkR88e45O+UKfgFLbswbGbNNUYVb8lfbwIhAPROWP++
DMH/cHte9XqbdT3beKt6lCTjWETYjPV7euiy
-----END CERTIFICATE-----
"""
GOOD_KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAAAAAAAAAAAAAAAA
AAAAAAAAAAAAAAAAAAAAAAAAA+mhRANCAATM96h75coW6sAIkj2rHii4EjEFqjzN
mRhwUiLKXTp8xrsnLqjlUwj5AlLJai6Va+i2NuV44y02Y/9bb/5enWyy
-----END PRIVATE KEY-----
"""

OTHER_CERT = """\
-----BEGIN CERTIFICATE-----
MIIBSTCB8KADAgECAgID6jAKBggqhkjOPQQDAjAcMRowGAYDVQQDDBFvdGhlci5l
eGFtcGxlLmNvbTAgFw0yMDAxMDEwMDAwMDBaGA8yMTIwMDEwMTAwMDAwMFowHDEa
MBgGA1UEAwwRb3RoZXIuZXhhbXBsZS5jb20wWTATBgcqhkjOPQIBBggqhkjOPQMB
BwNCAAT3KMV+RxFfLiDMDcv5aAoamsKTCfwokor36gHNNrS3uRTjeEjDpq66kIXj
FCYgZx2pokbkG/bvPaakxhLm9JwpoyAwHjAcBgNVHREEFTATghFvdGhlci5leGFt
cGxlLmNvbTAKBggqhkjOPQQDAgNIADBFAiA+7IqhGDhqMRzvj0yDqUpOcqxf6TTG
wfgeIn69wzxT3QIhAK+5SZtx25OXTbsXqCnhZihuD/wwCqq+IKTtg3lOmFYJ
-----END CERTIFICATE-----
"""
OTHER_KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAAAAAAAAAAAAAAAA
AAAAAAAAAAAAAAAAAAAAAAAAA+qhRANCAAT3KMV+RxFfLiDMDcv5aAoamsKTCfwo
kor36gHNNrS3uRTjeEjDpq66kIXjFCYgZx2pokbkG/bvPaakxhLm9Jwp
-----END PRIVATE KEY-----
"""

EXPIRED_CERT = """\
-----BEGIN CERTIFICATE-----
MIIBQTCB6KADAgECAgID6zAKBggqhkjOPQQDAjAaMRgwFgYDVQQDDA9vbGQuZXhh
bXBsZS5jb20wHhcNMjAwMTAxMDAwMDAwWhcNMjEwMTAxMDAwMDAwWjAaMRgwFgYD
VQQDDA9vbGQuZXhhbXBsZS5jb20wWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQE
lL6mAND2TPJjWkm6zb94gXLY63IIeCTwjoVNc45cucg83imBRYVRV3g539iSLY7t
ntFMlP9ojql5C7vl5yRTox4wHDAaBgNVHREEEzARgg9vbGQuZXhhbXBsZS5jb20w
CgYIKoZIzj0EAwIDSAAwRQIhALA8Zz4G6qlpZFSSSQFE6LkyWHeQVtus9psvM60W
wST8AiAB3Qp+rc8HZtjL0IV+QLeLnLvbbUVylNOFfWVTriit+Q==
-----END CERTIFICATE-----
"""
EXPIRED_KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAAAAAAAAAAAAAAAA
AAAAAAAAAAAAAAAAAAAAAAAAA+uhRANCAAQElL6mAND2TPJjWkm6zb94gXLY63II
eCTwjoVNc45cucg83imBRYVRV3g539iSLY7tntFMlP9ojql5C7vl5yRT
-----END PRIVATE KEY-----
"""

MISMATCHED_KEY = OTHER_KEY


def tls_secret(name: str, namespace: str, cert: str = GOOD_CERT, key: str = GOOD_KEY) -> str:
    """A ``kubernetes.io/tls`` Secret manifest holding ``cert`` and ``key``."""
    return (f"apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {namespace}}}\n"
            f"type: kubernetes.io/tls\nstringData:\n  tls.crt: {json.dumps(cert)}\n"
            f"  tls.key: {json.dumps(key)}\n")
