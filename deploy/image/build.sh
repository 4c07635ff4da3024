#!/usr/bin/env bash
# Builds Podway's OCI image without a registry or a container daemon, reproducibly:
#   deploy/image/build.sh OUT.tar [WORK_DIR]
# 1. Podway's wheel and its Python dependencies' wheels (pip, from a clean copy of the sources,
#    at the versions constraints.txt pins);
# 2. a minimal Debian root filesystem (mmdebstrap, from the host's apt sources) with the
#    packages in deploy/image/packages (a tar, kept between builds in PODWAY_IMAGE_BASE_CACHE
#    when set: only a change of those packages, the apt sources or the epoch redoes it), then
#    deploy/image/setup-root.sh inside it (the same script the Dockerfile runs): the
#    virtualenv /opt/podway, the user podway (10001);
# 3. umoci turns that directory into one layer of an OCI image (tag = Podway's version), with
#    the Dockerfile's entrypoint, user and environment; OUT.tar is the OCI layout as a tar.
# Every timestamp is SOURCE_DATE_EPOCH (default: the last commit's time), so that two builds of
# the same sources give the same image digest (seen, not yet guaranteed: docs/install.md). Needs root, mmdebstrap, umoci and a Python 3.11
# with pip (PODWAY_IMAGE_PYTHON, default .venv/bin/python): Debian bookworm's python3 is 3.11,
# so the dependencies' wheels must be cp311 ones.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?usage: deploy/image/build.sh OUT.tar [WORK_DIR]}
work=${2:-$repo/build/image}
py=${PODWAY_IMAGE_PYTHON:-$repo/.venv/bin/python}

fail() { echo "image: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (mmdebstrap --mode=root, umoci keeps file owners)"
for tool in mmdebstrap umoci; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (apt-get install $tool)"
done
"$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
    || fail "$py is not a Python 3.11 (the image's Debian python3 is 3.11): set PODWAY_IMAGE_PYTHON"
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH PYTHONHASHSEED=0
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
version=$("$py" -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1],"rb"))["project"]["version"])' "$repo/pyproject.toml")
step() { echo "image: $*" >&2; }

rm -rf "$work"
mkdir -p "$work/src" "$work/wheels"
step "1/4 wheels (Podway $version and its dependencies)"
# A clean copy (what the Dockerfile copies): no stale build/ or egg-info leaks into the wheel.
tar -C "$repo" --exclude=__pycache__ --exclude='*.egg-info' -cf - pyproject.toml README.md src \
    constraints.txt | tar -C "$work/src" -xf -
"$py" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$work/wheels" \
    -c "$work/src/constraints.txt" "$work/src"

step "2/4 root filesystem (mmdebstrap, Debian bookworm; then Podway's wheels in it)"
sources=""
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] && sources="$f" && break
done
[ -n "$sources" ] || fail "no apt sources on this host (/etc/apt/sources.list*)"
include=$(grep -v '^\s*#' "$here/packages" | tr -s ' \n' ',' | sed 's/^,//;s/,$//')
# 2a. The base: Debian's packages only, as a tar (kept in PODWAY_IMAGE_BASE_CACHE when set,
# keyed by everything it is made of: the package list, these options, the apt sources and the
# host's apt index files, the epoch), so that a change of Podway's sources redoes only 2b.
# Cached or not, 2b starts from that same tar, so both give the same image.
debstrap=(--variant=minbase --mode=root --format=directory
    --aptopt='Acquire::Check-Valid-Until "false"'
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/info/*' --include="$include"
    --customize-hook='rm -f "$1/etc/machine-id" && : > "$1/etc/machine-id"')
key=$( { printf '%s\n' base-1 "$SOURCE_DATE_EPOCH" "${debstrap[@]}"; cat "$sources";
         cat /var/lib/apt/lists/*Release 2>/dev/null || true; } | sha256sum | cut -c1-16)
cache=${PODWAY_IMAGE_BASE_CACHE:-}
base="${cache:-$work}/base-$key.tar"
if [ -n "$cache" ] && [ -s "$base" ]; then
    step "2a base $base (cached)"
else
    step "2a base (mmdebstrap: $include)"
    mkdir -p "$(dirname "$base")"
    mmdebstrap --quiet "${debstrap[@]}" bookworm "$work/base" "$sources"
    # apt's lists, partial/ included: mmdebstrap's last apt run leaves partial/ owned by _apt
    # in one build and by root in another (seen: the only difference between two builds).
    rm -rf "$work/base/var/lib/apt/lists/"*
    tar -C "$work/base" --xattrs --acls --numeric-owner --sort=name -cf "$base.part.$$" .
    mv "$base.part.$$" "$base"
    rm -rf "$work/base"
fi
step "2b Podway in the root filesystem (setup-root.sh)"
mkdir -p "$work/rootfs"
tar -C "$work/rootfs" --xattrs --acls --numeric-owner -xpf "$base"
mkdir -p "$work/rootfs/tmp/podway-build"
cp -a "$work/wheels" "$here/setup-root.sh" "$here/net-bind-cap.py" "$work/rootfs/tmp/podway-build/"
# A mount namespace of its own: /proc and the host's /dev for the chroot, gone when it ends.
unshare --mount --propagation private sh -ec '
    mount -t proc proc "$1/proc"; mount --rbind /dev "$1/dev"
    chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        SOURCE_DATE_EPOCH="$2" PYTHONHASHSEED=0 sh /tmp/podway-build/setup-root.sh \
        /tmp/podway-build/wheels' - "$work/rootfs" "$SOURCE_DATE_EPOCH"
rm -rf "$work/rootfs/tmp/podway-build"
# No device nodes in the image (the runtime makes /dev), as in images built from a Dockerfile.
find "$work/rootfs/dev" -mindepth 1 -delete
# Files the build wrote carry the build's time: clamp every time to SOURCE_DATE_EPOCH.
find "$work/rootfs" -newermt "@$SOURCE_DATE_EPOCH" -print0 \
    | xargs -0r touch --no-dereference --date="@$SOURCE_DATE_EPOCH"

step "3/4 OCI image (umoci)"
oci="$work/oci"
umoci init --layout "$oci"
umoci new --image "$oci:$version"
umoci insert --image "$oci:$version" --history.created "$created" \
    --history.created_by "deploy/image/build.sh" "$work/rootfs" /
# The Dockerfile's runtime settings (tests/deploy/test_image.py holds both to the same).
umoci config --image "$oci:$version" --created "$created" --history.created "$created" \
    --history.created_by "deploy/image/build.sh (config)" \
    --os linux --architecture amd64 --author "Podway" \
    --config.user 10001:10001 --config.entrypoint podway --config.cmd --help \
    --config.env PATH=/opt/podway/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONUNBUFFERED=1 --config.workingdir /
umoci gc --layout "$oci"

step "4/4 archive $out"
mkdir -p "$(dirname "$out")"
tar -C "$oci" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --format=gnu -cf "$out.part" .
mv "$out.part" "$out"
step "done: $out ($(du -h "$out" | cut -f1)), manifest $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$oci/index.json")"
