"""The emulator's Table printers: ages as Kubernetes prints them, the JSONPath subset CRD
printer columns use."""

from __future__ import annotations

import pytest

from podway.kube.emulator.tables import human_duration, jsonpath


@pytest.mark.parametrize(("seconds", "shown"), [
    (-5, "<invalid>"), (0, "0s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (179 * 60, "179m"),
    (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"), (47 * 3600, "47h"), (50 * 3600, "2d2h"),
    (9 * 86400, "9d"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y")])
def test_human_duration(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_jsonpath_subset() -> None:
    obj = {"spec": {"hosts": ["a", "b"], "rules": [{"port": 80}, {"port": 443}]},
           "status": {"conditions": [{"type": "Accepted", "status": "True"},
                                     {"type": "Programmed", "status": "False"}]}}
    assert jsonpath(obj, ".spec.hosts") == [["a", "b"]]
    assert jsonpath(obj, ".spec.hosts[1]") == ["b"]
    assert jsonpath(obj, ".spec.rules[*].port") == [80, 443]
    assert jsonpath(obj, '.status.conditions[?(@.type=="Programmed")].status') == ["False"]
    assert jsonpath(obj, "{.spec.missing}") == []
