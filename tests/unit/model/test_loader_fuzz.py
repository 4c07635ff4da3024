"""Fuzzing the loader and the file reader with hostile manifests: never an exception, and
memory bounded per input (alias bombs, random bytes, deep nesting, huge scalars)."""

from __future__ import annotations

import os
import tempfile
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podway.model.loader import LoadLimits, load_text
from podway.sources.manifests import read_manifest

EXAMPLES = int(os.environ.get("PODWAY_FUZZ_EXAMPLES", "150"))
PEAK_LIMIT = 64 << 20  # bytes traced per input; the largest input here is ~2 MB of text
LIMITS = LoadLimits(max_file_bytes=4 << 20)
PEAKS: list[int] = []  # per input, for the figures of a long run


@st.composite
def alias_bombs(draw: st.DrawFn) -> str:
    """Anchors of anchors: ``levels`` deep, ``width`` aliases each, optionally inside an
    Ingress's paths, sometimes recursive or naming an undefined anchor."""
    levels, width = draw(st.integers(1, 9)), draw(st.integers(1, 12))
    lines = [f"a0: &a0 [{draw(st.sampled_from(['x', '{path: /}', '1', '*a0']))}]"]
    for i in range(1, levels + 1):
        ref = draw(st.sampled_from([f"*a{i - 1}", f"*a{i}", "*nowhere"])) \
            if draw(st.booleans()) and i == levels else f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [" + ",".join([ref] * width) + "]")
    body = "\n".join(lines)
    if draw(st.booleans()):
        return ("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: b}\n"
                + body + f"\nspec: {{rules: [{{http: {{paths: *a{levels}}}}}]}}\n")
    return body + "\n"


def deep(n: int, flow: bool) -> str:
    if flow:
        return "a: " + "[" * n + "]" * n + "\n"
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(n)) + f"{'  ' * n}v\n"


def huge(n: int, where: str) -> str:
    """A scalar of ``n`` characters as the name, the apiVersion or a value; or n/4 documents."""
    svc = "apiVersion: {v}\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{x: '{x}'}}\n"
    big = "x" * n
    return {"name": svc.format(v="v1", name=big, x=""),
            "version": svc.format(v=big, name="a", x=""),
            "value": svc.format(v="v1", name="a", x=big),
            "docs": "---\n" * (n // 4)}[where]


texts = st.one_of(
    alias_bombs(),
    st.binary(max_size=400).map(lambda b: b.decode("utf-8", "replace")),
    st.text(max_size=300),
    st.builds(deep, st.integers(1, 3000), st.booleans()),
    st.builds(huge, st.integers(0, 2_000_000),
              st.sampled_from(["name", "version", "value", "docs"])),
)


def _peak(fn: object, *args: object) -> int:
    tracemalloc.start()
    try:
        fn(*args)  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(texts)
def test_load_text_never_raises_and_memory_stays_bounded(text: str) -> None:
    """Any hostile text loads into objects and errors, never an exception, within memory."""
    def run() -> None:
        result = load_text(text, source="fuzz.yaml", limits=LIMITS)
        assert all(len(str(e)) < 2000 for e in [*result.errors, *result.warnings])

    peak = _peak(run)
    PEAKS.append(peak)
    assert peak < PEAK_LIMIT


@settings(max_examples=EXAMPLES // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.one_of(texts.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary()))
def test_the_file_reader_never_raises_on_any_bytes(data: bytes) -> None:
    """The file source's reader takes any bytes (not UTF-8, over the size limit) as errors."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_bytes(data)
        peak = _peak(read_manifest, path)
        assert peak < PEAK_LIMIT
