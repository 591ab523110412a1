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
# --preserve-digests), and the script then asks the registry which digest it
# serves for TAG (`skopeo inspect`, a fresh read of the tag, not what the push
# reported) and refuses to bake when it is not that one. A node that
# imports the archive must name the image by that digest too (containerd:
# `ctr images import`, then `ctr images tag` to REPO@<digest>; see README,
# "Image"). REGISTRY may be plain HTTP only on loopback (127.0.0.1:PORT or
# localhost:PORT).
#
# The binary is static glibc, built by scripts/static-build.sh like the
# image's (one profile, one toolchain, one target dir: the dependencies it
# shares with buzz-acp are built once). The last line of stdout is its path;
# progress on stderr.
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
  # Plain HTTP on loopback only. The arrays expand as ${a[@]+"${a[@]}"}: a
  # plain "${a[@]}" of an empty array is an error under set -u on bash < 4.4.
  push_tls=() inspect_tls=()
  case "$registry" in
    127.0.0.1:*|localhost:*) push_tls=(--dest-tls-verify=false) inspect_tls=(--tls-verify=false) ;;
  esac
  say "pushing $BUZZ_SPRIG_IMAGE_ARCHIVE to $dest"
  skopeo copy --quiet --preserve-digests ${push_tls[@]+"${push_tls[@]}"} \
    "oci-archive:$BUZZ_SPRIG_IMAGE_ARCHIVE" "docker://$dest" >&2
  served="$(skopeo inspect --no-tags --format '{{.Digest}}' ${inspect_tls[@]+"${inspect_tls[@]}"} "docker://$dest")" ||
    die "cannot read back the digest $dest serves (skopeo inspect failed); not baking"
  [[ $served == "$digest" ]] ||
    die "the registry serves $served for $dest, not the archive's $digest: a pull of the baked default would fail; not baking"
  default="${dest%:*}@$digest"
else
  default="${BUZZ_SPRIG_IMAGE%:*}@$digest"
fi

say "building buzz-backend-kubernetes with the default image $default"
bin_dir="$(BUZZ_K8S_DEFAULT_IMAGE="$default" "$root/scripts/static-build.sh" buzz-backend-kubernetes | tail -n 1)"
bin="$bin_dir/buzz-backend-kubernetes"
[[ -x $bin ]] || die "static-build.sh did not leave $bin"
say "built $bin"
echo "$bin"
