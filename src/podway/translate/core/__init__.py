"""What every translation shares: problems, options, hosts, ports, addresses, regexes, TLS,
status."""
