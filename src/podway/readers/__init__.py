"""Readers of published pipeline states: the admin endpoint, the dashboard, metrics, explain,
rendering. They only read."""
