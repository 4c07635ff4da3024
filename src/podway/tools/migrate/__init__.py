"""Moving from ingress-nginx to Podway, with proof that clients see no change.

- ``probes``: the request set (generated from the routes of manifests, sampled from access logs).
- ``replay``: sends one probe to one entry point and records what came back (I/O lives here only).
- ``compare``: the per-route diff of two entry points' answers to the same probes (pure).
- ``to_gateway``: Ingresses with ``nginx.ingress.kubernetes.io/*`` annotations → Gateway API
  objects, with a note for every annotation that could not be carried over (pure);
  ``gateway_api`` builds those objects as plain mappings and dumps them as YAML.

``podway migrate compare`` and ``podway migrate to-gateway`` (``podway.cli.commands.migrate``) are
the thin shells around them; ``docs/migrate-from-ingress-nginx.md`` is the user's guide.
"""
