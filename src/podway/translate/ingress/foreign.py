"""Annotations of other Ingress controllers: recognised, so they are never ignored in silence.

An Ingress Podway serves may carry settings meant for another controller (rewrites, auth, rate
limits, source ranges...). Podway does not act on them, and a user who moved from that
controller would otherwise believe they still apply. Each one becomes an
``UnsupportedAnnotation`` warning naming it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from podway.translate.core.problems import quote

# Prefixes of annotations that configure a particular controller (not tools such as
# cert-manager or external-dns, which act on their own).
CONTROLLER_PREFIXES: tuple[tuple[str, str], ...] = (
    ("nginx.ingress.kubernetes.io/", "ingress-nginx"),
    ("nginx.org/", "NGINX Ingress Controller"),
    ("traefik.ingress.kubernetes.io/", "Traefik"),
    ("haproxy.org/", "HAProxy Ingress"),
    ("haproxy-ingress.github.io/", "HAProxy Ingress"),
    ("haproxy.router.openshift.io/", "OpenShift router"),
    ("ingress.kubernetes.io/", "a legacy controller"),
    ("alb.ingress.kubernetes.io/", "AWS Load Balancer Controller"),
    ("appgw.ingress.kubernetes.io/", "Application Gateway Ingress Controller"),
    ("ingress.gcp.kubernetes.io/", "GKE Ingress"),
    ("kubernetes.io/ingress.global-static-ip-name", "GKE Ingress"),
    ("ako.vmware.com/", "AKO"),
    ("projectcontour.io/", "Contour"),
    ("konghq.com/", "Kong"),
    ("getambassador.io/", "Emissary"),
)


def foreign_annotations(annotations: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """(annotation, message) for each annotation another controller would act on."""
    for name in sorted(annotations):
        owner = next((who for prefix, who in CONTROLLER_PREFIXES if name.startswith(prefix)),
                     None)
        if owner is not None:
            yield name, (f"annotation {quote(name)} configures {owner}; Podway does not act on "
                         "it, so the setting does not apply")
