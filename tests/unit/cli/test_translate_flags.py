"""``validate`` passes the translator's policy flags through (manifest addresses, host owners)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from podway.cli.app import app
from podway.cli.commands import register
from tests.unit.cli.test_errors import QUICKSTART, one_error_line, podway

register(app)
runner = CliRunner()

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: net}
spec: {type: LoadBalancer, loadBalancerIP: 198.18.0.53, ports: [{port: 5353}]}
"""


def test_manifest_addresses_flag_lets_a_vip_bind(tmp_path: Path) -> None:
    """Without the flag the VIP is refused with a warning; with it, the listener binds it."""
    (tmp_path / "s.yaml").write_text(SERVICE)
    plain = runner.invoke(app, ["validate", "--ir", "--address", "198.18.0.1", str(tmp_path)],
                          env={"COLUMNS": "80"})
    assert "AddressNotAllowed" in plain.output
    assert "address: 198.18.0.53" not in plain.output
    allowed = runner.invoke(app, ["validate", "--ir", "--address", "198.18.0.1",
                                  "--manifest-addresses", str(tmp_path)], env={"COLUMNS": "80"})
    assert allowed.exit_code == 0, allowed.output
    assert "address: 198.18.0.53" in allowed.output
    assert "AddressNotAllowed" not in allowed.output


NGINX_INGRESS = """
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx}
spec: {controller: k8s.io/ingress-nginx}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: old
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /$2
    nginx.ingress.kubernetes.io/configuration-snippet: "more_set_headers 'X-A: b';"
spec:
  ingressClassName: nginx
  rules:
  - host: shop.test
    http:
      paths:
      - {path: "/api(/|$)(.*)", pathType: ImplementationSpecific,
         backend: {service: {name: web, port: {number: 80}}}}
"""


def test_ingress_class_flag_takes_a_class_over(tmp_path: Path) -> None:
    """Without --ingress-class nginx the Ingress is listed as not Podway's; with it, its
    rewrite is served and its unserved annotation is a warning naming the key."""
    (tmp_path / "i.yaml").write_text(NGINX_INGRESS)
    plain = runner.invoke(app, ["validate", str(tmp_path)], env={"COLUMNS": "80"})
    assert plain.exit_code == 0, plain.output
    assert "Ingress/shop/old" in plain.output
    assert "k8s.io/ingress-nginx" in plain.output  # why it is not Podway's
    taken = runner.invoke(app, ["validate", "--ir", "--ingress-class", "nginx", str(tmp_path)],
                          env={"COLUMNS": "80"})
    assert "pattern: (?i)^(?:/api(/|$)(.*)).*$" in taken.output
    assert "UnsupportedAnnotation" in taken.output
    assert "configuration-snippet" in taken.output


@pytest.mark.parametrize("command", [["validate"], ["run", "--manifests"]])
def test_bad_ingress_class_flag_is_one_line(command: list[str]) -> None:
    """A class name Kubernetes would refuse is one clear line (exit status 2), not a trace."""
    line = one_error_line(podway(*command, QUICKSTART, "--ingress-class", "Not A Name"))
    assert "--ingress-class 'Not A Name' is not an IngressClass name" in line


@pytest.mark.parametrize("command", [["validate"], ["run", "--manifests"]])
def test_bad_nginx_config_flag_is_one_line(command: list[str]) -> None:
    """An ingress-nginx ConfigMap key Podway does not serve, or a bad value, is one line."""
    line = one_error_line(podway(*command, QUICKSTART, "--nginx-config", "hsts=maybe"))
    assert "--nginx-config: hsts: 'maybe' is not true or false" in line
    line = one_error_line(podway(*command, QUICKSTART, "--nginx-config", "use-gzip=true"))
    assert "'use-gzip' is not a setting Podway serves" in line


def test_nginx_config_flag_sets_hsts(tmp_path: Path) -> None:
    """--nginx-config reaches the translation: HSTS of a taken-over TLS host follows it."""
    from tests.certs import tls_secret

    (tmp_path / "i.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web, namespace: "
        "default}\nspec:\n  ingressClassName: nginx\n  tls: [{hosts: [a.test], secretName: "
        "shop-tls}]\n  rules:\n  - host: a.test\n    http: {paths: [{path: /, pathType: Prefix,"
        " backend: {service: {name: web, port: {number: 80}}}}]}\n---\n"
        + tls_secret("shop-tls", "default"))
    base = ["validate", "--ir", "--ingress-class", "nginx", str(tmp_path)]
    plain = runner.invoke(app, base, env={"COLUMNS": "200"})
    assert "- max-age=31536000; includeSubDomains" in plain.output, plain.output
    tuned = runner.invoke(app, [*base, "--nginx-config", "hsts-max-age=5"],
                          env={"COLUMNS": "200"})
    assert "- max-age=5; includeSubDomains" in tuned.output, tuned.output
