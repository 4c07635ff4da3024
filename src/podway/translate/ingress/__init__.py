"""Ingress → IR: the shared HTTP/HTTPS listeners, one Ingress's part, canaries, TLS, ingress-nginx
annotations (``nginx``) and other controllers' annotations (``foreign``)."""
