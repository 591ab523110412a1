#!/usr/bin/env bash
# A release build of the provider with the sprig image's digest baked in as
# its default image (spec §Image: "the default image reference MUST be pinned
# by digest"; the provider reads BUZZ_K8S_DEFAULT_IMAGE at compile time).
#
#   scripts/release-build.sh                      bake localhost/buzz-sprig@<digest>
#                                                 (the image scripts/image-build.sh built;
#                                                 for a node that imports the OCI archive)
#   scripts/release-build.sh REGISTRY/REPO:TAG    push the OCI archive there first and
#                                                 bake REGISTRY/REPO@<digest>
#
# Either way <digest> is the OCI archive's manifest digest, which is what a
# pull by digest finds: the push keeps the manifest byte for byte (skopeo
# --preserve-digests), and the script asks the registry which digest it
# serves for TAG and refuses to bake when it is not that one. A node that
# imports the archive must name the image by that digest too (containerd:
# `ctr images import`, then `ctr images tag` to REPO@<digest>; see README,
# "Image"). REGISTRY may be plain HTTP only on loopback (127.0.0.1:PORT or
# localhost:PORT).
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
digest="$BUZZ_SPRIG_IMAGE_DIGEST"
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "not a sha256 digest: '$digest' (from $image_env)"

if [[ $# -gt 0 ]]; then
  dest=$1
  [[ $dest == */*:* && $dest != *@* ]] || die "usage: scripts/release-build.sh [REGISTRY/REPO:TAG]"
  command -v skopeo >/dev/null 2>&1 ||
    die "skopeo is needed to push the archive unchanged. fix: apt-get update && apt-get install -y skopeo"
  registry="${dest%%/*}"
  tls=()
  case "$registry" in
    127.0.0.1:*|localhost:*) tls=(--dest-tls-verify=false) ;;
  esac
  digest_file="$(mktemp)"
  trap 'rm -f "$digest_file"' EXIT
  say "pushing $BUZZ_SPRIG_IMAGE_ARCHIVE to $dest"
  skopeo copy --quiet --preserve-digests "${tls[@]}" --digestfile "$digest_file" \
    "oci-archive:$BUZZ_SPRIG_IMAGE_ARCHIVE" "docker://$dest" >&2
  pushed="$(cat "$digest_file")"
  [[ $pushed == "$digest" ]] ||
    die "the registry stored $pushed, not the archive's $digest: a pull of the baked default would fail; not baking"
  default="${dest%:*}@$digest"
else
  default="${BUZZ_SPRIG_IMAGE%:*}@$digest"
fi

target="$(rustc -vV | sed -n 's/^host: //p')"
say "building buzz-backend-kubernetes with the default image $default"
BUZZ_K8S_DEFAULT_IMAGE="$default" RUSTFLAGS='-C target-feature=+crt-static' \
  cargo build --quiet --release --locked --target "$target" -p buzz-backend-kubernetes >&2
bin="${CARGO_TARGET_DIR:-$root/target}/$target/release/buzz-backend-kubernetes"
say "built $bin"
echo "$bin"
