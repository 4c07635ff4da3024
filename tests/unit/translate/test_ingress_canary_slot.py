"""An ingress-nginx canary joins the main Ingress of the same host and path even when regex paths
(``use-regex``/``rewrite-target`` on either) make that path a regex in Podway."""

from __future__ import annotations

import pytest

from podway.ir import Forward
from podway.ir.evaluate import Request, select_route
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import TranslateOptions, translate
from podway.translate.core.problems import Reason

INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: shop
  creationTimestamp: "2024-01-0{day}T00:00:00Z"
  annotations: {{{annotations}}}
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths:
      - path: /api
        pathType: Prefix
        backend: {{service: {{name: {name}, port: {{number: 80}}}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: shop}}
spec: {{ports: [{{port: 80}}]}}
"""
REGEX = "nginx.ingress.kubernetes.io/use-regex: 'true'"
CANARY = ("nginx.ingress.kubernetes.io/canary: 'true', "
          "nginx.ingress.kubernetes.io/canary-by-header: x-next")


@pytest.mark.parametrize(("main", "canary"), [("", ""), (REGEX, ""), ("", REGEX), (REGEX, REGEX)])
def test_canary_joins_its_main_whichever_side_has_regex_paths(main: str, canary: str) -> None:
    text = (INGRESS.format(name="main", day=1, annotations=main)
            + "---\n" + INGRESS.format(name="next", day=2,
                                       annotations=", ".join(a for a in (CANARY, canary) if a)))
    loaded = load_text(text)
    assert not loaded.errors, loaded.errors
    result = translate(Snapshot.of_objects(loaded.objects), TranslateOptions())
    assert not [p for p in result.problems if p.reason is Reason.CANARY_WITHOUT_MAIN]
    listener = next(lst for lst in result.ir.listeners if lst.name == "ingress/http")
    for headers, service in (({"x-next": "always"}, "next"), (None, "main")):
        route = select_route(listener, Request(host="shop.test", path="/api/x", headers=headers))
        assert route is not None
        assert isinstance(route.action, Forward)
        assert route.action.backends[0].pool is not None
        assert route.action.backends[0].pool.split("/")[2] == service, (headers, route.name)
