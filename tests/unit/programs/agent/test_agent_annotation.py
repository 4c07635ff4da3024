"""Antrea's pod annotation: deterministic encoding, tolerant decoding, order-insensitive compare."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from podway.model.npl import NplEntry, decode, encode, needs_write

E1 = NplEntry(pod_port=8080, node_ip="198.18.0.1", node_port=61001, protocol="tcp")
E2 = NplEntry(pod_port=53, node_ip="198.18.0.1", node_port=61000, protocol="udp")


def test_encode_is_sorted_compact_antrea_format() -> None:
    """Encoding sorts entries and uses Antrea's field names, compact JSON."""
    assert encode([E1, E2]) == (
        '[{"podPort":53,"nodeIP":"198.18.0.1","nodePort":61000,"protocol":"udp",'
        '"ipFamily":"IPv4"},{"podPort":8080,"nodeIP":"198.18.0.1","nodePort":61001,'
        '"protocol":"tcp","ipFamily":"IPv4"}]')


def test_encode_empty_means_remove() -> None:
    """No entries encode to None, which the agent writes as a null (remove) merge patch."""
    assert encode([]) is None


def test_decode_roundtrip_and_order_insensitive_compare() -> None:
    """A value in another order (e.g. written by Antrea) decodes equal and needs no write."""
    text = json.dumps([E1.raw(), E2.raw()])
    assert decode(text) == (frozenset({E1, E2}), None)
    assert not needs_write(text, [E2, E1])
    assert needs_write(text, [E1])
    assert needs_write(None, [E1])
    assert not needs_write(None, [])
    assert needs_write("[]", [])


def test_decode_legacy_protocols_field_and_missing_family() -> None:
    """Older Antrea wrote "protocols": [...] and no ipFamily; both are understood."""
    text = '[{"podPort":8080,"nodeIP":"2001:db8::1","nodePort":61001,"protocols":["tcp"]}]'
    entries, error = decode(text)
    assert error is None
    assert entries == {NplEntry(pod_port=8080, node_ip="2001:db8::1", node_port=61001,
                                protocol="tcp", ip_family="IPv6")}


def test_decode_reports_invalid_values() -> None:
    """Invalid JSON, non-lists, bad ports and protocols are reported, and must be rewritten."""
    for text in ("{", "{}", "[1]", '[{"podPort":0,"nodeIP":"x","nodePort":1,"protocol":"tcp"}]',
                 '[{"podPort":1,"nodeIP":"x","nodePort":1,"protocol":"sctp"}]',
                 '[{"podPort":true,"nodeIP":"x","nodePort":1,"protocol":"tcp"}]'):
        _, error = decode(text)
        assert error is not None, text
        assert needs_write(text, [])


@given(st.text())
def test_decode_never_raises(text: str) -> None:
    """Any annotation text decodes to entries or an error, never an exception."""
    entries, error = decode(text)
    assert isinstance(entries, frozenset)
    assert error is None or isinstance(error, str)


@given(st.lists(st.builds(NplEntry, pod_port=st.integers(1, 65535),
                          node_ip=st.just("198.18.0.1"), node_port=st.integers(1, 65535),
                          protocol=st.sampled_from(["tcp", "udp"]))))
def test_encode_decode_roundtrip(entries: list[NplEntry]) -> None:
    """decode(encode(x)) gives back the set x."""
    assert decode(encode(entries))[0] == frozenset(entries)
