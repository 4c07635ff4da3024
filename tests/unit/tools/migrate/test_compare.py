"""compare: what counts as a difference, how answers are normalised, and the command's exits."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from podway.base.errors import ConfigError
from podway.tools.migrate.compare import diff_answers
from podway.tools.migrate.replay import (
    Address,
    Answer,
    EntryPoint,
    ReplayOptions,
    cookie_shape,
    normalise_location,
    read_answer,
)
from tests.e2e.harness import backend_manifests, echo_backend
from tests.unit.cli.test_errors import one_error_line, podway

OLD = EntryPoint(name="old", http=Address(host="127.0.0.1", port=8080),
                 https=Address(host="127.0.0.1", port=8443))


def test_entry_points_parse_one_url_per_scheme() -> None:
    side = EntryPoint.parse("old", ["http://127.0.0.1:8080", "https://[::1]"])
    assert side.http == Address(host="127.0.0.1", port=8080)
    assert side.https == Address(host="::1", port=443)
    assert side.https.netloc == "[::1]:443"


@pytest.mark.parametrize("urls", [["ftp://x"], ["http://a", "http://b"], ["http://a/path"],
                                  ["http://a:99999"], ["nonsense"]])
def test_bad_entry_points_are_refused(urls: list[str]) -> None:
    with pytest.raises(ConfigError, match="--old"):
        EntryPoint.parse("old", urls)


@pytest.mark.parametrize(("location", "expected"), [
    ("https://shop.test:8443/a?b=1", "https://shop.test/a?b=1"),  # the side's own port
    ("https://shop.test:443", "https://shop.test/"),  # default port, empty path
    ("https://shop.test", "https://shop.test/"),
    ("http://shop.test:8080/x", "http://shop.test/x"),
    ("https://shop.test:9999/x", "https://shop.test:9999/x"),  # somebody else's port stays
    ("/relative", "/relative"),
    ("", ""),
])
def test_locations_drop_the_entry_points_own_port(location: str, expected: str) -> None:
    assert normalise_location(location, OLD) == expected


def test_read_answer_takes_the_echo_identity_and_ignores_proxy_headers() -> None:
    body = json.dumps({"name": "web-1", "path": "/v2/x", "host": "up.test",
                       "headers": {"x-forwarded-prefix": "/v2", "x-other": "1"}}).encode()
    answer = read_answer(status=200, headers=[("Server", "nginx"), ("Date", "now"),
                                              ("X-Envoy-Upstream-Service-Time", "1"),
                                              ("Access-Control-Allow-Origin", "*"),
                                              ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")],
                         body=body, entry=OLD, opts=ReplayOptions())
    assert answer == Answer(status=200, backend="web-1", upstream_path="/v2/x",
                            upstream_host="up.test",
                            headers=(("access-control-allow-origin", "*"),
                                     ("set-cookie", "a=…, b=…")),
                            upstream_headers=(("x-forwarded-prefix", "/v2"),))


def test_affinity_cookies_compare_by_name_and_attributes_not_value() -> None:
    nginx = "INGRESSCOOKIE=1a2b3c; Expires=Tue, 01 Dec 2026 10:00:00 GMT; Path=/; HttpOnly"
    envoy = "INGRESSCOOKIE=\"9f8e\"; HttpOnly; Path=/"
    assert cookie_shape(nginx) == cookie_shape(envoy) == "INGRESSCOOKIE=…; httponly; path=/"
    assert cookie_shape("other=1; Path=/") != cookie_shape(envoy)
    assert cookie_shape("INGRESSCOOKIE=1; Path=/api; HttpOnly") != cookie_shape(envoy)


def test_read_answer_prefers_a_named_backend_header() -> None:
    answer = read_answer(status=200, headers=[("X-Served-By", "pod-7")], body=b"<html>",
                         entry=OLD, opts=ReplayOptions(backend_header="x-served-by"))
    assert (answer.backend, answer.headers, answer.upstream_path) == ("pod-7", (), "")


def test_diff_names_each_field_that_differs() -> None:
    old = Answer(status=200, backend="a", upstream_path="/x", headers=(("h", "1"),))
    new = Answer(status=200, backend="b", upstream_path="/x", headers=(("h", "2"), ("n", "3")))
    assert [(d.field, d.old, d.new) for d in diff_answers(old, new)] == [
        ("backend", "a", "b"), ("header h", "1", "2"), ("header n", "", "3")]
    assert diff_answers(old, old) == ()
    assert [d.field for d in diff_answers(Answer(error="refused"), old)] == [
        "status", "error", "backend", "upstream path", "header h"]


async def _compare(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podway", "migrate", "compare", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: default}
spec:
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"""


async def test_compare_of_two_backends_reports_the_backend_and_exits_1(tmp_path: Path) -> None:
    """Echo servers stand in for both entry points: same name, no diff; other name, a diff."""
    (tmp_path / "in.yaml").write_text(INGRESS + "---\n" + backend_manifests("web", 80))
    log = tmp_path / "access.log"
    log.write_text(json.dumps({"host": "shop.test", "path": "/from-log?q=1"}) + "\n")
    tasks = []
    try:
        a, task = await echo_backend("web")
        tasks.append(task)
        a2, task = await echo_backend("web")
        tasks.append(task)
        b, task = await echo_backend("web-next")
        tasks.append(task)
        code, out, _ = await _compare("--old", f"http://127.0.0.1:{a}", "--new",
                                      f"http://127.0.0.1:{a2}", "--from-manifests",
                                      str(tmp_path / "in.yaml"), "--requests", str(log))
        assert code == 0, out
        assert out.strip().endswith("no differences")
        code, out, _ = await _compare("--old", f"http://127.0.0.1:{a}", "--new",
                                      f"http://127.0.0.1:{b}", "--from-manifests",
                                      str(tmp_path / "in.yaml"), "--requests", str(log),
                                      "--json", "--method", "GET")
        assert code == 1
        data = json.loads(out)
        routes = {r["route"]: r for r in data["routes"]}
        first = routes["Ingress default/web shop.test Prefix /"]["differing"][0]
        assert first["fields"] == {"backend": {"old": "web", "new": "web-next"}}
        assert any(r["differing"][0]["request"]["path"] == "/from-log?q=1"
                   for r in data["routes"] if r["route"].startswith(str(log)))
        assert data["requests"] == data["differing_requests"] == 4  # /, /compare, no route, log
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def test_compare_without_a_request_source_is_one_line() -> None:
    line = one_error_line(podway("migrate", "compare", "--old", "http://127.0.0.1:1",
                                 "--new", "http://127.0.0.1:2"))
    assert "--from-manifests" in line


def test_compare_with_an_unreadable_log_is_one_line(tmp_path: Path) -> None:
    line = one_error_line(podway("migrate", "compare", "--old", "http://127.0.0.1:1",
                                 "--new", "http://127.0.0.1:2", "--requests",
                                 str(tmp_path / "missing.log")))
    assert "missing.log" in line


def test_a_repeated_request_is_sent_once_without_a_misleading_warning() -> None:
    """Two http sides and a request listed twice: it is replayed once and nobody is told to
    give an http:// entry point (both have one); a missing https side is still named."""
    from podway.cli.commands.migrate import replayable
    from podway.tools.migrate.probes import parse_log
    from podway.tools.migrate.replay import EntryPoint

    log = "\n".join(['{"method": "GET", "host": "a.test", "path": "/x", "scheme": "http"}'] * 2
                    + ['{"method": "GET", "host": "a.test", "path": "/y", "scheme": "https"}'])
    probes = list(parse_log(log).probes) * 2  # the same request from manifests and a log
    sides = (EntryPoint.parse("old", ["http://127.0.0.1:1"]),
             EntryPoint.parse("new", ["http://127.0.0.1:2"]))
    kept, warnings = replayable(probes, sides)
    assert [p.path for p in kept] == ["/x"]
    assert warnings == ["1 https requests skipped: give both --old and --new a https:// "
                        "entry point"]
