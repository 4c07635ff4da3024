"""ingress-nginx compatibility: its ``nginx.ingress.kubernetes.io/*`` annotations as typed values.

``podway.translate.ingress.nginx.annotations`` reads them (no I/O, no Kubernetes client); the
Ingress translation serves them, ``podway migrate to-gateway`` converts them and ``podway migrate
compare`` probes them. None decides by an annotation's text: all use the values ``read`` returns.
"""

from podway.translate.ingress.nginx.annotations import (
    PREFIX,
    AnnotationIssue,
    NginxAnnotations,
    read,
)

__all__ = ["PREFIX", "AnnotationIssue", "NginxAnnotations", "read"]
