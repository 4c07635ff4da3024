#!/usr/bin/env bash
# Builds Podway's image twice from the same sources, one build after the other in two separate
# work folders, and checks the two archives are byte-identical:
#   deploy/image/check-reproducible.sh [FOLDER]
# Exit 0 and "reproducible: sha256 …" when they are; exit 1 and the files that differ (path
# and sha256 of each side, from the image's layer) when not. Takes two builds' time (minutes
# each), so it is a check to run, not part of the test suite's default run; the test marked
# image (tests/deploy/test_image.py) makes one more build beside the suite's and compares them.
# Both builds read one snapshot of the last commit (git archive HEAD: what is committed, not
# the work tree, which may change while they run) with one SOURCE_DATE_EPOCH (its time).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
folder=${1:-$(mktemp -d /tmp/podway-repro.XXXXXX)}
mkdir -p "$folder"
rm -rf "$folder/src" && mkdir "$folder/src"
git -C "$repo" archive HEAD | tar -x -C "$folder/src"
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}
export SOURCE_DATE_EPOCH PODWAY_IMAGE_PYTHON=${PODWAY_IMAGE_PYTHON:-$repo/.venv/bin/python}
echo "reproducible: $(git -C "$repo" rev-parse --short HEAD), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH" >&2
for run in a b; do
    echo "reproducible: build $run" >&2
    "$folder/src/deploy/image/build.sh" "$folder/$run.tar" "$folder/work-$run"
    rm -rf "$folder/work-$run"
done
sum_a=$(sha256sum "$folder/a.tar" | cut -d' ' -f1)
sum_b=$(sha256sum "$folder/b.tar" | cut -d' ' -f1)
if [ "$sum_a" = "$sum_b" ]; then
    echo "reproducible: sha256 $sum_a ($folder/a.tar and b.tar)"
    exit 0
fi
echo "NOT reproducible: $sum_a != $sum_b; files that differ:" >&2
python3 "$here/image_diff.py" "$folder/a.tar" "$folder/b.tar" >&2
exit 1
