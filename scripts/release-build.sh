#!/usr/bin/env bash
# A release build of the provider with the sprig image's digest baked in as
# its default image (spec §Image: "the default image reference MUST be pinned
# by digest"; the provider reads BUZZ_K8S_DEFAULT_IMAGE at compile time).
#
#   scripts/release-build.sh                      bake localhost/buzz-sprig@<digest>
#                                                 (the image scripts/image-build.sh built)
#   scripts/release-build.sh REGISTRY/REPO:TAG    push the image there first
#                                                 (podman push), and bake
#                                                 REGISTRY/REPO@<the pushed digest>
#
# The binary is static glibc, like the image's (one toolchain, shared
# dependencies). The last line of stdout is its path; progress on stderr.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
say() { printf 'release-build: %s\n' "$*" >&2; }
die() { printf 'release-build: %s\n' "$*" >&2; exit 1; }

image_env="$("$root/scripts/image-build.sh" | tail -n 1)"
# shellcheck disable=SC1090
. "$image_env"
# shellcheck source=podman-env.sh
. "$root/scripts/podman-env.sh"

if [[ $# -gt 0 ]]; then
  dest=$1
  [[ $dest == */*:* && $dest != *@* ]] || die "usage: scripts/release-build.sh [REGISTRY/REPO:TAG]"
  digest_file="$(mktemp)"
  trap 'rm -f "$digest_file"' EXIT
  say "pushing $BUZZ_SPRIG_IMAGE to $dest"
  buzz_podman push --digestfile "$digest_file" "$BUZZ_SPRIG_IMAGE" "docker://$dest" >&2
  digest="$(cat "$digest_file")"
  default="${dest%:*}@$digest"
else
  digest="$BUZZ_SPRIG_IMAGE_DIGEST"
  default="${BUZZ_SPRIG_IMAGE%:*}@$digest"
fi
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "not a sha256 digest: '$digest'"

target="$(rustc -vV | sed -n 's/^host: //p')"
say "building buzz-backend-kubernetes with the default image $default"
BUZZ_K8S_DEFAULT_IMAGE="$default" RUSTFLAGS='-C target-feature=+crt-static' \
  cargo build --quiet --release --locked --target "$target" -p buzz-backend-kubernetes >&2
bin="${CARGO_TARGET_DIR:-$root/target}/$target/release/buzz-backend-kubernetes"
say "built $bin"
echo "$bin"
