"""HAProxy's own counters under the series names the Envoy engine's scrape has.

The HAProxy engine's worker answers ``show stat`` on its private runtime socket (no listener,
no per-request cost: HAProxy counts anyway). Its frontend and no-route backend rows become the
series the Grafana dashboard and docs/observability.md name, with the same labels, where they
mean the same thing; the listener label is the listener's stat prefix, as Envoy's:

| series | from HAProxy's row |
| --- | --- |
| ``envoy_http_downstream_rq_total`` | the listener's frontend, ``req_tot`` (HTTP requests) |
| ``envoy_http_downstream_rq_xx`` | the frontend, ``hrsp_1xx`` .. ``hrsp_5xx`` |
| ``envoy_http_downstream_cx_active`` | the frontend, ``scur`` (open client connections) |
| ``envoy_http_no_route`` | the listener's no-route backend (its 404), ``req_tot`` |
| ``envoy_server_live`` | 1 when HAProxy answered |

``sample`` gives the dashboard the same counters as Envoy's admin gives it (per listener and per
pool: requests, 4xx, 5xx; no latency quantiles).

Not mapped, as nothing of HAProxy's means the same: ``envoy_http_downstream_rq_time`` (HAProxy
keeps averages over its last 1,024 requests, not a histogram) and
``envoy_control_plane_connected_state`` (HAProxy has no xDS stream). ``podway_engine_stats_up``
says whether this scrape has them (0: missing, not zero).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping

from podway.envoy.config.common import stat_prefix
from podway.haproxy.backends import backend_name
from podway.haproxy.process import HAProxyEngine
from podway.readers.dashboard.engine_view import Figures, Sample

_CLASSES = ("1", "2", "3", "4", "5")


def rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """``show stat`` CSV → (proxy, FRONTEND|BACKEND|server) → its fields."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for row in csv.DictReader(io.StringIO(text.lstrip("# "))):
        proxy, name = row.get("pxname") or "", row.get("svname") or ""
        if proxy:
            out[(proxy, name)] = {k: v or "" for k, v in row.items() if k}
    return out


def _number(fields: Mapping[str, str] | None, key: str) -> int:
    value = (fields or {}).get(key, "")
    return int(value) if value.isdigit() else 0


def exposition(frontends: Mapping[str, tuple[str, str]], text: str | None) -> bytes:
    """Prometheus text for the HTTP listeners ``frontends`` names (listener → (frontend,
    no-route backend)) from one ``show stat`` answer; None: HAProxy did not answer."""
    up = [_family("podway_engine_stats_up", "gauge",
                  "1 when the supervised engine answered this scrape's stats request.",
                  [("", 0 if text is None else 1)])]
    if text is None:
        return _join(up)
    found = rows(text)
    total, classes, active, no_route = [], [], [], []
    for listener, (frontend, missed) in sorted(frontends.items()):
        label = f'envoy_http_conn_manager_prefix="{_escape(stat_prefix(listener))}"'
        fe = found.get((frontend, "FRONTEND"))
        if fe is None:
            continue
        total.append((label, _number(fe, "req_tot")))
        classes += [(f'{label},envoy_response_code_class="{c}"', _number(fe, f"hrsp_{c}xx"))
                    for c in _CLASSES]
        active.append((label, _number(fe, "scur")))
        no_route.append((label, _number(found.get((missed, "BACKEND")), "req_tot")))
    return _join([
        *up,
        _family("envoy_http_downstream_rq_total", "counter",
                "Requests received (HAProxy engine: the listener's frontend).", total),
        _family("envoy_http_downstream_rq_xx", "counter",
                "Responses by class (HAProxy engine: the frontend's hrsp_Nxx).", classes),
        _family("envoy_http_downstream_cx_active", "gauge",
                "Open client connections (HAProxy engine: the frontend's scur).", active),
        _family("envoy_http_no_route", "counter",
                "Requests no route matched (HAProxy engine: its 404 backend).", no_route),
        _family("envoy_server_live", "gauge", "1 when the engine is live.", [("", 1)]),
    ])


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(name: str, kind: str, what: str, samples: list[tuple[str, int]]) -> list[str]:
    if not samples:
        return []
    return [f"# HELP {name} {what}", f"# TYPE {name} {kind}",
            *(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}"
              for labels, value in samples)]


def _join(families: list[list[str]]) -> bytes:
    lines = [line for family in families for line in family]
    return ("\n".join(lines) + "\n").encode() if lines else b""


async def scrape(engine: HAProxyEngine | None, limit_s: float = 2.0) -> bytes:
    """The series of a supervised HAProxy (nothing before its first configuration)."""
    rendered = engine.rendered if engine is not None else None
    if engine is None or rendered is None:
        return b""
    return exposition(rendered.http_frontends, await engine.stats(limit_s))


def figures(fields: Mapping[str, str] | None) -> Figures | None:
    if fields is None:
        return None
    return Figures(total=_number(fields, "req_tot"), errors_4xx=_number(fields, "hrsp_4xx"),
                   errors_5xx=_number(fields, "hrsp_5xx"))


async def sample(engine: HAProxyEngine | None, now: float, limit_s: float = 2.0
                 ) -> Sample | None:
    """The dashboard's traffic figures from HAProxy's counters: per listener (its stat
    prefix, as Envoy's) and per pool; None before its first configuration or when it does
    not answer."""
    rendered = engine.rendered if engine is not None else None
    text = await engine.stats(limit_s) if engine is not None and rendered is not None else None
    if rendered is None or text is None:
        return None
    found = rows(text)
    listeners = {stat_prefix(name): f for name, (frontend, _) in rendered.http_frontends.items()
                 if (f := figures(found.get((frontend, "FRONTEND")))) is not None}
    pools = {pool: f for pool in rendered.slots
             if (f := figures(found.get((backend_name(pool), "BACKEND")))) is not None}
    return Sample(taken_at=now, listeners=listeners, pools=pools)
