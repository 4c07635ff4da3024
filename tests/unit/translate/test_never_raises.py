"""The loader and the translator report problems; they never raise, whatever the manifests."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podway.ir import HASHING, IR
from podway.ir.dump import to_yaml
from podway.model import Snapshot
from podway.model.loader import load_text, parse_object
from podway.translate import BackendMode, TranslateOptions, translate
from podway.translate.core.addresses import address_problem
from podway.translate.core.tls import _check_pair

from .strategies import manifests

options = st.builds(TranslateOptions, address=st.sampled_from(["198.18.0.10", "0.0.0.0"]),
                    mode=st.sampled_from(list(BackendMode)), manifest_addresses=st.booleans(),
                    strict_host_ownership=st.booleans())


def engine_would_accept(ir: IR) -> None:
    """What the engine refuses never reaches the IR: addresses are IPs, certificate pairs load."""
    for listener in ir.listeners:
        assert address_problem(listener.address) is None, listener.address
        for cert in listener.certificates:
            assert _check_pair(cert.cert_pem.encode(), cert.key_pem.encode()).error is None
    for pool in ir.pools.values():
        for member in pool.members:
            assert address_problem(member.address) is None, member.address
        settings = pool.settings
        # Persistence hashes and hashing has a key (podway.ir.pool's invariant).
        assert (settings.persistence is not None) == (settings.lb_policy in HASHING), settings
        check = settings.health_check
        if check is not None:  # values Envoy accepts
            assert check.healthy_threshold >= 1
            assert check.unhealthy_threshold >= 1
            assert 0 < check.timeout_ms <= check.interval_ms
            assert all(100 <= low <= high <= 599 for low, high in check.expected)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests, options)
def test_translate_never_raises(docs: list[Any], opts: TranslateOptions) -> None:
    """Arbitrary, mostly plausible manifests load and translate without an exception, in any
    mode, and the IR holds nothing the engine would refuse."""
    objects = []
    for i, doc in enumerate(docs):
        obj, error = parse_object(doc, document=i)
        assert obj is None or error is None
        if obj is not None:
            objects.append(obj)
    result = translate(Snapshot.of_objects(objects), opts)
    to_yaml(result.ir)  # the dump of any result works too
    engine_would_accept(result.ir)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_loader_never_raises_on_any_text(text: str) -> None:
    """Any text, YAML or not, loads into objects and errors without an exception."""
    result = load_text(text)
    assert all(str(e) for e in result.errors)


@settings(max_examples=100, deadline=None)
@given(manifests)
def test_loader_round_trips_yaml_documents(docs: list[Any]) -> None:
    """A multi-document YAML of the manifests loads exactly like the documents one by one."""
    text = yaml.safe_dump_all(docs)
    from_text = load_text(text)
    one_by_one = [parse_object(d, source="<text>", document=i) for i, d in enumerate(docs)]
    assert len(from_text.objects) == sum(1 for obj, _ in one_by_one if obj is not None)
    assert len(from_text.errors) == sum(1 for _, err in one_by_one if err is not None)
