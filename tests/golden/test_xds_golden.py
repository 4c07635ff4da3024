"""Golden files for ``podway.envoy_config``: ``xds/<case>/ir.yaml`` in, one JSON file per xDS
type out."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.envoy_config import build
from podway.ir.load import from_yaml
from podway.xds.dump import files

CASES = sorted(p for p in (Path(__file__).parent / "xds").iterdir() if (p / "ir.yaml").exists())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_xds_golden(case: Path, update_golden: bool) -> None:
    """The Envoy resources built from the case's IR equal the reviewed golden files."""
    out = files(build(from_yaml((case / "ir.yaml").read_text(encoding="utf-8"))))
    for name, text in out.items():
        golden = case / name
        if update_golden:
            golden.write_text(text, encoding="utf-8")
        else:
            assert golden.read_text(encoding="utf-8") == text, f"{case.name}/{name} differs"
