"""Series names in Prometheus text, and in the Grafana dashboard's queries (shared by tests)."""

from __future__ import annotations

import json
import re
from pathlib import Path

GRAFANA = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "podway.json"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s", re.MULTILINE)
_TYPE = re.compile(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$", re.MULTILINE)
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def series_names(text: str) -> set[str]:
    """Every name a query may use: sampled ones, and those declared (a labelled counter with
    no child yet has a TYPE line but no sample)."""
    found = {m.group(1) for m in _SAMPLE.finditer(text)}
    for name, kind in _TYPE.findall(text):
        found.add(name)
        found.update(name + suffix for suffix in _SUFFIXES.get(kind, ()))
    return found


def families(text: str) -> dict[str, str]:
    """``name: type`` of every declared family."""
    return dict(_TYPE.findall(text))


def grafana_metrics() -> set[str]:
    """The podway_/envoy_ names the Grafana dashboard's queries use."""
    dashboard = json.loads(GRAFANA.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs, "the Grafana dashboard has no queries"
    found: set[str] = set()
    for expr in exprs:
        # Label names appear in matchers and in by (...) clauses: leave those out.
        bare = re.sub(r"\{[^}]*\}|\b(?:by|without)\s*\([^)]*\)", " ", expr)
        found |= set(re.findall(r"\b((?:podway|envoy)_[a-zA-Z0-9_]+)", bare))
    return found
