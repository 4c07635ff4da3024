"""Golden files for ``podway.envoy.config``: IR in, one JSON file per xDS type out.

Two suites:

* ``xds/<case>/ir.yaml``: hand-written IR (features the translator cases do not reach).
* ``xds/translate/<case>/``: the xDS output of every translator golden case
  (``translate/<case>.in.yaml`` → translate → build), so a translator change shows its effect on
  what Envoy gets, and a builder change shows on every kind of input.

Regenerate with ``pytest --update-golden`` and review the diff like code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.envoy.config import build
from podway.envoy.xds.dump import files
from podway.ir.load import from_yaml
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import translate

from .test_translate_golden import CASES as TRANSLATE_CASES
from .test_translate_golden import options_of

GOLDEN = Path(__file__).parent / "xds"
CASES = sorted(p for p in GOLDEN.iterdir() if (p / "ir.yaml").exists())


def _compare(folder: Path, out: dict[str, str], update_golden: bool) -> None:
    if update_golden:
        folder.mkdir(parents=True, exist_ok=True)
    for name, text in out.items():
        golden = folder / name
        if update_golden:
            golden.write_text(text, encoding="utf-8")
        else:
            assert golden.exists(), f"{golden} is missing: run pytest --update-golden"
            assert golden.read_text(encoding="utf-8") == text, f"{folder.name}/{name} differs"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_xds_golden(case: Path, update_golden: bool) -> None:
    """The Envoy resources built from the case's IR equal the reviewed golden files."""
    out = files(build(from_yaml((case / "ir.yaml").read_text(encoding="utf-8"))))
    _compare(case, out, update_golden)


def _case_name(case: Path) -> str:
    return case.name.removesuffix(".in.yaml")


@pytest.mark.parametrize("case", TRANSLATE_CASES, ids=_case_name)
def test_xds_golden_of_translate_case(case: Path, update_golden: bool) -> None:
    """The Envoy resources of each translator golden case equal the reviewed golden files."""
    text = case.read_text(encoding="utf-8")
    loaded = load_text(text, source=case.name)
    result = translate(Snapshot.of_objects(loaded.objects), options_of(text))
    _compare(GOLDEN / "translate" / _case_name(case), files(build(result.ir)), update_golden)


def test_every_translate_case_has_xds_golden() -> None:
    """No xDS golden folder outlives its translator case (a renamed case leaves none behind)."""
    names = {_case_name(c) for c in TRANSLATE_CASES}
    folders = {p.name for p in (GOLDEN / "translate").iterdir() if p.is_dir()}
    assert folders == names
