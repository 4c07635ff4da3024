"""Reading a Gateway translation's statuses and problems (``conclude``) changes nothing: asked
twice it answers the same, and the translation's own problem list stays as ``build`` left it,
with and without a memo (issue 22: getters do not write)."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate.core.options import TranslateOptions
from podway.translate.core.ports import PortTable
from podway.translate.gateway import GatewayMemo, GatewayTranslation, MemoTranslation

GOLDEN = Path(__file__).parents[2] / "golden" / "translate"
# Cases whose statuses carry problems of every source: listeners, routes, BackendTLSPolicies.
CASES = ["gateway-conflicts", "gateway-backendtls", "gateway-addresses"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("memoised", [False, True])
def test_conclude_reads_without_writing(case: str, memoised: bool) -> None:
    loaded = load_text((GOLDEN / f"{case}.in.yaml").read_text(), source=case)
    snapshot = Snapshot.of_objects(loaded.objects)
    opts = TranslateOptions(address="198.18.0.10")
    run = (MemoTranslation(snapshot=snapshot, opts=opts, memo=GatewayMemo()) if memoised
           else GatewayTranslation(snapshot=snapshot, opts=opts))
    run.build(PortTable())
    built = list(run.problems)
    statuses, problems = run.conclude()
    assert run.problems == built
    assert problems[:len(built)] == built
    assert len(problems) > len(built)  # the statuses gave rise to problems of their own
    assert run.conclude() == (statuses, problems)
    assert run.problems == built
