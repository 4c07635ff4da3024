"""The controller: the Kubernetes API in, xDS for engines and status/events back out.

``source`` (informers → snapshot updates), ``modes`` (backend mode per Service, switched
make-before-break; the NodePortLocal opt-in), ``status`` (status subresource writer), ``events``
(de-duplicated, rate-limited Events), ``metrics`` and ``main`` (the wiring). The pipeline,
translator and xDS server are the same as standalone mode's. See docs/controller.md.
"""
