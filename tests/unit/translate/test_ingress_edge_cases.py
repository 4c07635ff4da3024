"""Ingress edge cases found in review: TLS entries with only invalid hosts, empty hosts,
and Service ports that share a number across protocols."""

from __future__ import annotations

from podway.ir import Forward
from podway.ir.evaluate import Request, select_route
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import translate
from tests.certs import tls_secret

SECRET = tls_secret("s", "d") + """---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: d}
spec: {ports: [{port: 53, protocol: UDP, name: dns}, {port: 53, protocol: TCP, name: dns-tcp}]}
"""


def ingress(spec: str) -> str:
    return f"""
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: i, namespace: d}}
spec:
  ingressClassName: podway
{spec}
---
{SECRET}"""


def test_tls_entry_with_only_invalid_hosts_is_not_a_default_certificate() -> None:
    """Hosts all invalid: the entry is dropped with a problem, never made the default cert."""
    text = ingress("""  tls: [{hosts: [Shop.Example.com], secretName: s}]
  rules:
  - host: other.example.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web,
                                                                  port: {number: 53}}}}]}""")
    result = translate(Snapshot.of_objects(load_text(text).objects))
    assert [lst.name for lst in result.ir.listeners] == ["ingress/http"]
    assert any("no valid host left" in p.message for p in result.problems)


def test_empty_host_means_any_host() -> None:
    """host: "" (as Helm charts render it) is the rule without a host, not an invalid host."""
    text = ingress("""  rules:
  - host: ""
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web,
                                                                  port: {number: 53}}}}]}""")
    result = translate(Snapshot.of_objects(load_text(text).objects))
    assert not result.problems
    [listener] = result.ir.listeners
    assert select_route(listener, Request(host="anything.example.com", path="/")) is not None


def test_port_number_shared_by_udp_and_tcp_resolves_to_tcp() -> None:
    """An Ingress backend port 53 picks the TCP port when 53/UDP is listed first."""
    text = ingress("""  rules:
  - host: a.example.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web,
                                                                  port: {number: 53}}}}]}""")
    result = translate(Snapshot.of_objects(load_text(text).objects))
    assert not result.problems
    route = select_route(result.ir.listeners[0], Request(host="a.example.com", path="/"))
    assert route is not None
    assert isinstance(route.action, Forward)
