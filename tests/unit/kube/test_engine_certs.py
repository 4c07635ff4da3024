"""Engine certificates from a self-managed CA through the CSR API (issue 23.10, first part):
a request is granted only for the node the requester's token is bound to and the group its
service account serves, and the certificate lets the engine claim exactly those in the xDS
server's identity check."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography import x509

from podway.engines.identity import from_pem
from podway.kube import engine_certs
from podway.kube.npl_keys import NODE_EXTRA, new_private_key

EDGE = "system:serviceaccount:podway-system:podway-engine-edge"
USERS = {EDGE: "edge", "system:serviceaccount:podway-system:podway-engine-dmz": "dmz"}


def request(*, user: str = EDGE, node: str | None = "n1", cn: str = "n1",
            group: str = "edge") -> dict[str, Any]:
    pem = engine_certs.engine_request(new_private_key(), node=cn, group=group)
    return {"spec": {"signerName": engine_certs.SIGNER, "username": user,
                     "extra": {NODE_EXTRA: [node]} if node else {},
                     "request": base64.b64encode(pem).decode()}}


def test_a_granted_request_gets_a_certificate_for_its_node_and_group_only() -> None:
    ca_cert, ca_key = engine_certs.new_ca()
    obj = request()
    grant, why = engine_certs.granted(obj, users=USERS)
    assert grant == ("n1", "edge"), why
    pem = engine_certs.sign(obj, ca_cert, ca_key, node="n1", group="edge")
    identity = from_pem(pem)
    assert identity.refusal(node="n1", group="edge") is None
    assert identity.refusal(node="n2", group="edge") is not None
    assert identity.refusal(node="n1", group="dmz") is not None
    cert = x509.load_pem_x509_certificate(pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_cert))
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


@pytest.mark.parametrize(("case", "obj", "words"), [
    ("another node's name", request(cn="n2"), "runs on 'n1'"),
    ("another group", request(group="dmz"), "serves engine group 'edge'"),
    ("not an engine", request(user="system:serviceaccount:tenant:default"),
     "not an engine service account"),
    ("a token bound to no node", request(node=None), "names no node"),
])
def test_a_request_beyond_the_requesters_node_or_group_is_refused(
        case: str, obj: dict[str, Any], words: str) -> None:
    grant, why = engine_certs.granted(obj, users=USERS)
    assert grant is None, case
    assert words in why, (case, why)


def test_another_signers_request_is_not_ours() -> None:
    obj = request()
    obj["spec"]["signerName"] = "kubernetes.io/kube-apiserver-client"
    assert engine_certs.granted(obj, users=USERS)[0] is None
