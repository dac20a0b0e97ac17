#!/usr/bin/env bash
# Build the sandbox runtime image (posttrain-sandbox:latest) used by the docker sandbox backend, fully offline.
#
# Idempotent: skips the build when the image exists and was built from this definition (its label
# posttrain.definition is the hash of containers/sandbox/ and base-image.sh, whose package list it inherits), unless
# FORCE=1; an image of an older definition is rebuilt. Builds the base image first if needed (see base-image.sh;
# BASE_ROOTFS and BASE_IMAGE are passed through).
#
# Example:
#   containers/build-sandbox-image.sh
#   FORCE=1 SANDBOX_IMAGE=posttrain-sandbox:dev containers/build-sandbox-image.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export BASE_IMAGE="${BASE_IMAGE:-posttrain-base:bookworm}"
SANDBOX_IMAGE="${SANDBOX_IMAGE:-posttrain-sandbox:latest}"

definition="$(cd "$here" && { find sandbox -type f; echo base-image.sh; } | LC_ALL=C sort | xargs sha256sum \
              | sha256sum | cut -c1-16)"
built="$(docker image inspect --format '{{ index .Config.Labels "posttrain.definition" }}' "$SANDBOX_IMAGE" \
         2>/dev/null || true)"
if [[ "${FORCE:-0}" != "1" && "$built" == "$definition" ]]; then
    echo "build-sandbox-image: $SANDBOX_IMAGE already exists (FORCE=1 rebuilds)"
    exit 0
fi

"$here/base-image.sh"
docker build --network none --build-arg BASE_IMAGE="$BASE_IMAGE" --label "posttrain.definition=$definition" \
    -t "$SANDBOX_IMAGE" "$here/sandbox"
echo "build-sandbox-image: built $SANDBOX_IMAGE"
