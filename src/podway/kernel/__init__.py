"""The kernel L4 engine: IR → nftables DNAT (``plan``, ``ruleset``), checks (``health``),
the runner (``engine``). Reads only the IR (../shared/ARCHITECTURE.md, "Engines behind one IR")."""
