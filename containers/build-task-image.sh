#!/usr/bin/env bash
# Build a Flyte task image (containers/task/Dockerfile) with the docker build itself offline (--network none).
#
# The build context is staged first, in a temporary directory: wheels of posttrain (from this working tree) and of
# every dependency of posttrain[$EXTRA] (pip download, from pip's configured indexes and find-links: the local wheel
# mirror here), the bubblewrap .deb (apt's cache, else apt-get download) and the seccomp allow-list. The base image is
# the debootstrap one (base-image.sh). Prints the image's size and the installed posttrain version at the end.
#
# Example:
#   containers/build-task-image.sh                                  # posttrain-cpu:latest
#   IMAGE=posttrain-cpu:abc123 EXTRA=cpu containers/build-task-image.sh
#   IMAGE=posttrain-gpu:abc123 EXTRA=gpu containers/build-task-image.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
export BASE_IMAGE="${BASE_IMAGE:-posttrain-base:bookworm}"
EXTRA="${EXTRA:-cpu}"
IMAGE="${IMAGE:-posttrain-$EXTRA:latest}"
PIP="${PIP:-$root/.venv/bin/pip}"
SECCOMP="${SECCOMP:-/usr/share/containers/seccomp.json}"

"$here/base-image.sh"
ctx="$(mktemp -d /tmp/posttrain-task-image.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/wheels" "$ctx/debs"

# posttrain's own wheel from the working tree, then every dependency; sdists among them are built into wheels here,
# where the build dependencies are (DeepSpeed's setup.py imports torch).
"$PIP" wheel --quiet --no-deps --no-build-isolation -w "$ctx/wheels" "$root"
"$PIP" download --quiet -d "$ctx/wheels" pip "$root[$EXTRA]"
for sdist in "$ctx"/wheels/*.tar.gz; do
    [[ -e "$sdist" ]] || continue
    "$PIP" wheel --quiet --no-deps --no-build-isolation -w "$ctx/wheels" "$sdist" && rm "$sdist"
done

deb="$(ls /var/cache/apt/archives/bubblewrap_*.deb 2>/dev/null | tail -n 1 || true)"
if [[ -n "$deb" ]]; then cp "$deb" "$ctx/debs/"; else (cd "$ctx/debs" && apt-get download bubblewrap); fi
cp "$SECCOMP" "$ctx/seccomp.json"
cp "$here/task/Dockerfile" "$ctx/Dockerfile"

echo "build-task-image: context $(du -sh "$ctx" | cut -f1), building $IMAGE (EXTRA=$EXTRA) offline"
sha="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
docker build --network none --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg EXTRA="$EXTRA" \
    --build-arg GIT_SHA="$sha" -t "$IMAGE" "$ctx"
docker run --rm --network none "$IMAGE" python -c \
    "import importlib.metadata as m, posttrain, tasks, workflows; print('posttrain', m.version('posttrain'))"
echo "build-task-image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
