"""A bad rotation of a Secret in use keeps its last good pair serving, with an error saying
so; a good one replaces it; after a restart with only the bad one, the error says no good pair
is known (issue 23 item 8)."""

from __future__ import annotations

from podway.ir import IR, TLSCertificate
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.pipeline import Pipeline
from podway.sources.base import SourceUpdate
from podway.translate import TranslateOptions
from tests.certs import GOOD_CERT, GOOD_KEY, MISMATCHED_KEY, OTHER_CERT, OTHER_KEY, tls_secret
from tests.unit.test_pipeline import QueueSource

SHOP = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: shop}
spec:
  ingressClassName: podway
  tls: [{hosts: [shop.test], secretName: cert}]
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"""
KEY = ("shop", "cert")


def update(cert: str, key: str, *, changed: bool = False) -> SourceUpdate:
    text = SHOP + "---\n" + tls_secret("cert", "shop", cert, key)
    return SourceUpdate(Snapshot.of_objects(load_text(text).objects), (),
                        changed=(("Secret", KEY),) if changed else None)


def served(ir: IR) -> list[TLSCertificate]:
    return [c for ls in ir.listeners for c in ls.certificates]


def pipeline() -> Pipeline:
    return Pipeline(QueueSource(), translate=TranslateOptions(address="127.0.0.1"))


def test_a_bad_rotation_keeps_the_last_good_pair_and_says_so() -> None:
    """Good → mismatched key (also as an incremental change): still the good pair, one load
    error on the Secret naming the problem; → another good pair: that one, no error."""
    pipe = pipeline()
    first = pipe.apply(update(GOOD_CERT, GOOD_KEY))
    assert [(c.cert_pem, c.key_pem) for c in served(first.ir)] == [(GOOD_CERT, GOOD_KEY)]
    assert first.update.errors == ()
    for changed in (True, False):
        bad = pipe.apply(update(GOOD_CERT, MISMATCHED_KEY, changed=changed))
        assert [(c.cert_pem, c.key_pem) for c in served(bad.ir)] == [(GOOD_CERT, GOOD_KEY)]
        assert not [p for p in bad.problems if "cert" in p.message]
        [error] = bad.update.errors
        assert error.object == "Secret/shop/cert"
        assert "does not belong" in error.message
        assert "last good" in error.message
    fixed = pipe.apply(update(OTHER_CERT, OTHER_KEY, changed=True))
    assert [(c.cert_pem, c.key_pem) for c in served(fixed.ir)] == [(OTHER_CERT, OTHER_KEY)]
    assert fixed.update.errors == ()


def test_after_a_restart_with_only_the_bad_pair_it_is_said_plainly() -> None:
    """A fresh process (a restart) that only ever sees the bad version: no pair to serve, the
    Ingress has its error, and the Secret's error says no earlier good pair is known."""
    state = pipeline().apply(update(GOOD_CERT, MISMATCHED_KEY))
    assert served(state.ir) == []
    assert any("does not belong" in p.message for p in state.problems)
    [error] = state.update.errors
    assert "no earlier good certificate" in error.message
    assert "not across restarts" in error.message


def test_a_deleted_secret_is_not_kept() -> None:
    """Deleting the Secret is deliberate: its pair goes (the Ingress reports it missing)."""
    pipe = pipeline()
    pipe.apply(update(GOOD_CERT, GOOD_KEY))
    gone = pipe.apply(SourceUpdate(Snapshot.of_objects(load_text(SHOP).objects), ()))
    assert served(gone.ir) == []
    assert gone.update.errors == ()
