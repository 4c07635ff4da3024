"""Leaf helpers every layer may use: the error root, address parsing, backoff, named tasks."""
