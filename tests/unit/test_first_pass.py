"""``first_pass.until_served``: waits while an engine is not served, at most its bound; not at
all with every engine served (or none connected)."""

from __future__ import annotations

from typing import Any

from podway.programs.controller.first_pass import until_served


class Servicer:
    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.asked = 0

    def served(self) -> bool:
        self.asked += 1
        return self.answers.pop(0) if self.answers else True


async def test_it_waits_until_every_engine_is_served() -> None:
    servicer = Servicer([False, False, True])
    fake: Any = servicer
    assert await until_served(fake, limit_s=10, every_s=0)
    assert servicer.asked == 3


async def test_it_gives_up_at_its_bound() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    fake: Any = Servicer([False] * 100)
    assert not await until_served(fake, limit_s=5, every_s=0, clock=clock)
    assert fake.asked < 10


async def test_no_wait_when_served() -> None:
    fake: Any = Servicer([True])
    assert await until_served(fake, limit_s=0, every_s=0)
    assert fake.asked == 1
