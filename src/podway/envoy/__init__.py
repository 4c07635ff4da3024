"""The Envoy engine: IR → Envoy resources (``config``), served over ADS (``xds``), to an Envoy that
Podway launches and supervises (``engine``)."""
