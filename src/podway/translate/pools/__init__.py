"""Pools: backends, members per backend mode, client-address settings and traffic settings as
written (``traffic_values``); ``podway.translate.traffic`` applies them, every source in one
precedence."""
