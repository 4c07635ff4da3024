"""The live dashboard: virtual services → pools → members with health, traffic and problems.

``view`` turns a pipeline state (and the engine's figures, ``engine_view``) into one JSON
document; ``app`` serves it as a page with live updates. Nothing here writes anywhere: the
dashboard is a reader of states, like the status file, and shows no secret (certificate names,
never keys). See docs/observability.md.
"""
