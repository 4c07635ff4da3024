"""Our own writes read back: which watch events need no parse (``KubeSource.expect_echo``).

A write (the controller's status PATCH) makes one resourceVersion of an object; its watch event
is that object's previous version plus the write. Dropped unparsed only when it is the very
version the write made and a watch delivered it (a watch delivered every change under the
write before it); one a list brings is parsed, since a list reports only where an object is
now. Any later event of the object drops the expectation: one per live object at most.
"""

from __future__ import annotations

from podway.model.snapshot import Key

Ident = tuple[str, Key]  # (kind, (namespace, name))


class Echoes:
    def __init__(self) -> None:
        self._expected: dict[Ident, str] = {}
        self.dropped = 0  # events of our own writes not parsed (a metric for callers)

    def expect(self, ident: Ident, version: str) -> None:
        self._expected[ident] = version

    def take(self, ident: Ident, event: str, version: object, *, listing: bool) -> bool:
        """True when this event is our own write read back (and counts it)."""
        expected = self._expected.pop(ident, None) if self._expected else None
        echo = expected is not None and expected == version and event == "MODIFIED" \
            and not listing
        self.dropped += echo
        return echo

    def __len__(self) -> int:
        return len(self._expected)
