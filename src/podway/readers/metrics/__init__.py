"""Prometheus metrics of the Podway processes that run a pipeline or an engine.

``pipeline`` follows a pipeline's states into metrics; ``exposition`` serves ``/metrics`` (this
process's registry, then the supervised Envoy's own ``/stats/prometheus``) and ``/healthz``.
The agent keeps its own registry (``podway.programs.agent.metrics``). Every metric name, type and
label is listed in docs/observability.md; a test checks that list against the registries.
"""
