"""The structure phase in two steps (``podway.translate.structure``): a first start takes the
pools' settings from ``structure_pools`` and sends their clusters, and the ``update`` of that
snapshot finishes the structure (``finish_structure``). Over every golden translation case, with
its options: the same IR, problems and statuses as a translator that never split it, the pools'
settings those of the result, and the translator's memo left so that the next change translates
as it would after a plain first update."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.model import Service, Snapshot
from podway.model.loader import load_text
from podway.translate import IncrementalTranslator
from tests.golden.test_translate_golden import CASES, options_of


def _snapshot(case: Path) -> tuple[Snapshot, str]:
    text = case.read_text()
    return Snapshot.of_objects(load_text(text, source=case.name).objects), text


def _touched(snapshot: Snapshot) -> Snapshot | None:
    """The snapshot with its first Service's labels changed (a structural change)."""
    services = snapshot.kind(Service)
    if not services:
        return None
    key, service = next(iter(services.items()))
    meta = service.metadata.model_copy(update={"labels": {**service.metadata.labels,
                                                          "podway.test/touched": "yes"}})
    return snapshot.replace(Service.KIND, {key: service.model_copy(update={"metadata": meta})})


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name.removesuffix(".in.yaml"))
def test_the_first_update_after_the_pools_is_the_plain_one(case: Path) -> None:
    snapshot, text = _snapshot(case)
    opts = options_of(text)
    split, plain = IncrementalTranslator(opts), IncrementalTranslator(opts)
    settings = split.first_pools(snapshot)
    result, expected = split.update(snapshot, None), plain.update(snapshot, None)
    assert result.ir == expected.ir
    assert (result.problems, result.statuses) == (expected.problems, expected.statuses)
    assert settings == {name: pool.settings for name, pool in result.ir.pools.items()}
    later = _touched(snapshot)
    if later is not None:  # the memo the split run left serves the next change alike
        after, expected_after = split.update(later, None), plain.update(later, None)
        assert after.ir == expected_after.ir
        assert (after.problems, after.statuses) == (expected_after.problems,
                                                    expected_after.statuses)


def test_a_first_update_of_another_snapshot_does_not_take_the_pools_step() -> None:
    """``first_pools`` of one snapshot, then the ``update`` of another: the update translates
    its own snapshot in full (the pools step is dropped, never finished for the wrong one)."""
    case = next(c for c in CASES if _touched(_snapshot(c)[0]) is not None)
    snapshot, text = _snapshot(case)
    other = _touched(snapshot)
    assert other is not None
    opts = options_of(text)
    split = IncrementalTranslator(opts)
    split.first_pools(snapshot)
    result = split.update(other, None)
    expected = IncrementalTranslator(opts).update(other, None)
    assert result.ir == expected.ir
    assert (result.problems, result.statuses) == (expected.problems, expected.statuses)
