"""``first_pass.until_served``: waits while an engine is not served and the engines answer, at
most its bound; not at all with every engine served (or none connected)."""

from __future__ import annotations

from typing import Any

from podway.programs.controller import first_pass
from podway.programs.controller.first_pass import until_served


class Servicer:
    """``served()`` answers from a list (then True); ``answered_at`` moves by ``answering``."""

    def __init__(self, answers: list[bool], clock: list[float], *, answering: bool) -> None:
        self.answers = answers
        self.asked = 0
        self.clock = clock
        self.answering = answering

    @property
    def answered_at(self) -> float:
        return self.clock[0] if self.answering else 0.0

    def served(self) -> bool:
        self.asked += 1
        return self.answers.pop(0) if self.answers else True


def _clock(step: float) -> tuple[list[float], Any]:
    now = [0.0]

    def clock() -> float:
        now[0] += step
        return now[0]
    return now, clock


async def test_it_waits_until_every_engine_is_served() -> None:
    now, clock = _clock(first_pass.IDLE_S / 2)  # each look: half the idle bound later
    fake: Any = Servicer([False] * 5 + [True], now, answering=True)
    assert await until_served(fake, limit_s=1e9, every_s=0, clock=clock)
    assert fake.asked == 6


async def test_it_gives_up_when_no_engine_answers() -> None:
    now, clock = _clock(first_pass.IDLE_S / 2)
    fake: Any = Servicer([False] * 100, now, answering=False)
    assert not await until_served(fake, limit_s=1e9, every_s=0, clock=clock)
    assert fake.asked == 2  # began, then one idle half, then the bound


async def test_it_gives_up_at_its_bound_even_with_answers() -> None:
    now, clock = _clock(1.0)
    fake: Any = Servicer([False] * 100, now, answering=True)
    assert not await until_served(fake, limit_s=10, every_s=0, clock=clock)
    assert fake.asked < 12


async def test_no_wait_when_served() -> None:
    now, clock = _clock(1.0)
    fake: Any = Servicer([True], now, answering=False)
    assert await until_served(fake, limit_s=0, every_s=0, clock=clock)
    assert fake.asked == 1
