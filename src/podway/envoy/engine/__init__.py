"""The engine: Envoy, bootstrapped to Podway's xDS server, launched and supervised by Podway."""
