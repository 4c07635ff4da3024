"""Golden Gateway API cases: ``translate/gateway-*.in.yaml`` → IR, problems and statuses.

Run ``pytest --update-golden`` to rewrite the ``.out.yaml`` files; review the diff like code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from podway.ir.dump import dump_yaml, to_data
from podway.model.loader import load_paths
from podway.model.snapshot import Snapshot
from podway.translate import translate
from podway.translate.status import statuses_to_api

CASES = sorted((Path(__file__).parent / "translate").glob("gateway-*.in.yaml"))


def render(case: Path) -> str:
    loaded = load_paths([case])
    assert not loaded.errors, [str(e) for e in loaded.errors]
    result = translate(Snapshot.of_objects(loaded.objects))
    data: dict[str, Any] = {
        "listeners": to_data(result.ir.listeners),
        "pools": [to_data(result.ir.pools[name]) for name in sorted(result.ir.pools)],
        "problems": [str(p) for p in result.problems],
        "statuses": statuses_to_api(result.statuses),
    }
    return dump_yaml(data)


@pytest.mark.parametrize("case", CASES, ids=[c.name.removesuffix(".in.yaml") for c in CASES])
def test_gateway_golden(case: Path, update_golden: bool) -> None:
    """Translating the case's manifests gives exactly the recorded IR, problems and statuses."""
    out = case.with_name(case.name.replace(".in.yaml", ".out.yaml"))
    text = render(case)
    if update_golden or not out.exists():
        out.write_text(text)
        if not update_golden:
            pytest.fail(f"{out.name} was missing and has been written; review and commit it")
    assert text == out.read_text()
