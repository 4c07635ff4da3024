"""``podway diagram``: Mermaid nodes and edges of golden cases, and real SVG/PNG renders."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podway.cli.app import app
from podway.cli.commands import register
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.readers.explain.diagram import dot, graph, mermaid
from podway.translate import translate
from tests.golden.test_translate_golden import options_of

register(app)
GOLDEN = Path(__file__).parents[3] / "golden" / "translate"


def _mermaid(case: str, **kw: object) -> str:
    text = (GOLDEN / f"{case}.in.yaml").read_text()
    opts = options_of(text)
    ir = translate(Snapshot.of_objects(load_text(text, source=case).objects), opts).ir
    return mermaid(graph(ir, mode=str(opts.mode), **kw))  # type: ignore[arg-type]


def _labels(text: str) -> dict[str, str]:
    return {m[0]: m[1] for m in re.findall(r'^\s+(\w+)[\[({]+"(.*?)"[\])}]+$', text, re.M)}


def _edges(text: str) -> set[tuple[str, str, str]]:
    labels = _labels(text)
    out = set()
    for a, label, b in re.findall(r"^\s+(\w+) -->(?:\|(.*?)\|)? (\w+)$", text, re.M):
        out.add((labels[a].split("<br/>")[0], label, labels[b].split("<br/>")[0]))
    return out


def test_mermaid_of_the_nodeportlocal_case_has_the_whole_path() -> None:
    """Client → listener → host → route → pool → members (NPL) → pods, draining member red."""
    text = _mermaid("mode-nodeportlocal")
    assert text.startswith("flowchart LR\n")
    edges = _edges(text)
    assert {("Client", "HTTP", "198.18.0.10:80 HTTP"),
            ("198.18.0.10:80 HTTP", "", "host shop.example.com"),
            ("host shop.example.com", "", "prefix /"),
            ("prefix /", "", "pool pool/shop/web/80"),
            ("pool pool/shop/web/80", "NPL", "198.18.20.1:61000"),
            ("198.18.20.1:61000", "DNAT on the node", "pod shop/web-a")} <= edges
    labels = _labels(text)
    unhealthy = re.search(r"^\s+class (\S+) unhealthy$", text, re.M)
    assert unhealthy is not None
    assert "198.18.20.2:61000<br/>draining" in {labels[i] for i in unhealthy[1].split(",")}


def test_tls_termination_and_passthrough_are_marked() -> None:
    assert "TLS terminated here" in _mermaid("gateway-https")
    assert "TLS passthrough (not terminated)" in _mermaid("gateway-tls-passthrough")


def test_host_keeps_only_what_serves_it() -> None:
    """--host: only virtual hosts covering the name (and their listeners) remain, whatever its
    case and a trailing dot."""
    every = {label for label in _labels(_mermaid("ingress-hosts")).values()
             if label.startswith("host ")}
    one = {label for label in _labels(_mermaid("ingress-hosts", host="a.example.com")).values()
           if label.startswith("host ")}
    assert len(every) > 2
    assert one == {"host a.example.com", "host *.example.com"}  # exact, and the wildcard
    assert _mermaid("ingress-hosts", host="A.Example.com.") == _mermaid(
        "ingress-hosts", host="a.example.com")  # any case, a trailing dot: the same name
    quick = _mermaid("service-lb", host="a.example.com")
    assert " TCP" not in quick  # TCP/UDP routes know no host


def test_nodeport_members_show_the_kube_proxy_hop() -> None:
    assert "NodePort" in _mermaid("mode-nodeport")
    assert "kube-proxy" in _mermaid("mode-nodeport")


@pytest.mark.skipif(shutil.which("dot") is None and os.geteuid() != 0,
                    reason="Graphviz's dot is not installed (./dev test installs it as root)")
@pytest.mark.parametrize(("fmt", "magic"), [("svg", b"<svg "), ("png", b"\x89PNG\r\n")])
def test_svg_and_png_render_with_graphviz(tmp_path: Path, fmt: str, magic: bytes) -> None:
    """The command renders a real image of a golden case through dot."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.yaml").write_text((GOLDEN / "gateway-https.in.yaml").read_text())
    out = tmp_path / f"d.{fmt}"
    result = CliRunner().invoke(app, ["diagram", "--manifests", str(tmp_path / "m"), "--format",
                                      fmt, "--output", str(out)])
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert data.startswith(magic) or magic in data[:400]
    if fmt == "svg":
        assert "TLS terminated here" in data.decode()


def test_dot_text_escapes_labels() -> None:
    """Non-ASCII in labels stays as UTF-8 (DOT reads no \\u escapes)."""
    text = dot(graph(translate(Snapshot.of_objects(load_text(
        (GOLDEN / "mode-nodeport.in.yaml").read_text(), source="x").objects),
        options_of((GOLDEN / "mode-nodeport.in.yaml").read_text())).ir, mode="nodeport"))
    assert text.startswith("digraph podway {")
    assert "kube-proxy → any ready pod" in text  # UTF-8 as is: DOT has no \\u escapes
    assert "\\u2192" not in text


def test_each_listener_names_its_engine_and_kernel_ports_are_dnat() -> None:
    """A listener the IR gives the kernel (podway.io/engine: kernel) is drawn as the kernel
    engine's DNAT, whatever the proxy; the others name the proxy serving them (Envoy, or
    HAProxy under --engine haproxy)."""
    for engine, proxy in (("envoy", "Envoy"), ("haproxy", "HAProxy")):
        labels = _labels(_mermaid("engine-kernel", engine=engine))
        kernel = next(v for v in labels.values() if "service/shop/db/5432/tcp" in v)
        assert "kernel engine: nftables DNAT" in kernel
        other = next(v for v in labels.values() if "service/shop/typo/5434/tcp" in v)
        assert f"served by {proxy}" in other
    edges = _edges(_mermaid("engine-kernel"))
    assert ("Client", "TCP · DNAT", "198.18.0.10:5432 TCP") in edges
    assert ("Client", "TCP", "198.18.0.10:5434 TCP") in edges


def test_diagram_under_the_kernel_engine_draws_every_l4_port_it_serves(tmp_path: Path) -> None:
    """``podway diagram --engine kernel``: as ``podway run --engine kernel``, every TCP listener
    the kernel can serve is its, without the annotation."""
    (tmp_path / "web.yaml").write_text((GOLDEN / "service-lb.in.yaml").read_text())
    done = CliRunner().invoke(app, ["diagram", "--manifests", str(tmp_path), "--engine",
                                    "kernel"])
    assert done.exit_code == 0, done.output
    assert "kernel engine: nftables DNAT" in done.output
    refused = CliRunner().invoke(app, ["diagram", "--manifests", str(tmp_path), "--engine",
                                       "nginx"])
    assert "--engine 'nginx': one of envoy, haproxy, kernel" in str(refused.exception)
