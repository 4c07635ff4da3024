"""Golden files for the kernel engine (``podway.kernel``): IR in, nftables ruleset out.

* ``kernel/<case>/ir.yaml`` (hand-written IR) → ``ruleset.nft`` (the exact transaction text
  the engine installs, every member usable), ``update.nft`` (the in-place transactions, in
  order, when each service's last member leaves and comes back: ``changed``, ``SEPARATOR``
  between them) and ``skipped.txt`` (listeners it leaves out, why); ``ruleset-traffic.nft`` and
  ``update-traffic.nft`` the same with the per-packet member counters
  (``--member-traffic-counters``).
* ``kernel/translate/<case>.nft``: the ruleset of every translator golden case that has a TCP
  or UDP listener, so a translator change shows its effect on what the kernel gets.

Regenerate with ``pytest --update-golden`` and review the diff like code.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from podway.ir import IR, ListenerProtocol
from podway.ir.load import from_yaml
from podway.kernel.plan import Service, plan
from podway.kernel.ruleset import Installed, full, update
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import translate

from .test_translate_golden import CASES as TRANSLATE_CASES
from .test_translate_golden import options_of

GOLDEN = Path(__file__).parent / "kernel"
CASES = sorted(p for p in GOLDEN.iterdir() if (p / "ir.yaml").exists())
L4 = (ListenerProtocol.TCP, ListenerProtocol.UDP)


def _compare(golden: Path, text: str, update_golden: bool) -> None:
    if update_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    else:
        assert golden.exists(), f"{golden} is missing: run pytest --update-golden"
        assert golden.read_text(encoding="utf-8") == text, f"{golden.name} differs"


SEPARATOR = "# ---- the next transaction ----\n"


def steps(services: tuple[Service, ...], traffic: bool = False) -> list[str]:
    """The transactions of two in-place changes after ``full(services)``: each service's last
    member leaves, then comes back."""
    first, holds = update(Installed(services, traffic=traffic), changed(services))
    second, _ = update(holds, services)
    return [*first, *second]


def changed(services: tuple[Service, ...]) -> tuple[Service, ...]:
    """``services`` with each one's last member gone (a member leaving, a failed check)."""
    return tuple(replace(s, backends=s.backends[:-1]) for s in services)


def _all_usable(pool: str, member: object) -> bool:
    return True


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kernel_golden(case: Path, update_golden: bool) -> None:
    """The ruleset (and the listeners left out) of the case's IR equal the reviewed files."""
    services, skipped = plan(from_yaml((case / "ir.yaml").read_text(encoding="utf-8")),
                             _all_usable)
    _compare(case / "ruleset.nft", full(services), update_golden)
    _compare(case / "update.nft", SEPARATOR.join(steps(services)), update_golden)
    _compare(case / "ruleset-traffic.nft", full(services, traffic=True), update_golden)
    _compare(case / "update-traffic.nft", SEPARATOR.join(steps(services, traffic=True)),
             update_golden)
    _compare(case / "skipped.txt", "".join(
        f"{s.name}: {'served, ' if s.served else ''}{s.reason}\n" for s in skipped),
        update_golden)


def _l4(ir: IR) -> bool:
    return any(listener.protocol in L4 for listener in ir.listeners)


def _translated(case: Path) -> IR:
    text = case.read_text(encoding="utf-8")
    loaded = load_text(text, source=case.name)
    return translate(Snapshot.of_objects(loaded.objects), options_of(text)).ir


L4_CASES = [c for c in TRANSLATE_CASES if _l4(_translated(c))]


@pytest.mark.parametrize("case", L4_CASES, ids=lambda c: c.name.removesuffix(".in.yaml"))
def test_kernel_golden_of_translate_case(case: Path, update_golden: bool) -> None:
    """The kernel ruleset of each translator golden case with L4 listeners is as reviewed."""
    services, _ = plan(_translated(case), _all_usable)
    name = case.name.removesuffix(".in.yaml")
    _compare(GOLDEN / "translate" / f"{name}.nft", full(services), update_golden)


def test_every_kernel_translate_golden_has_its_case() -> None:
    """No kernel golden outlives its translator case."""
    names = {c.name.removesuffix(".in.yaml") for c in L4_CASES}
    found = {p.name.removesuffix(".nft") for p in (GOLDEN / "translate").glob("*.nft")}
    assert found == names
