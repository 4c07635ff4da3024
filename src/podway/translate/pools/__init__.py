"""Pools: backends, members per backend mode, client-address settings and traffic settings."""
