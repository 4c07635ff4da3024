"""Human-readable views of translation results (tables for the CLI). No I/O besides returning
rich renderables."""
