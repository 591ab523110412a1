#!/usr/bin/env bash
# Builds the sprig image (images/sprig) on a machine with no container
# registry: the base is a rootfs made by mmdebstrap from Debian's packages
# (cached by package set), the binaries are built statically on the host, and
# buildah assembles the image into a project-private podman storage.
#
#   scripts/image-build.sh            build (or reuse) the image
#
# Prints the image ID, its digest and an OCI archive you can push to your own
# registry. The digest is the archive's manifest digest, the one a registry
# serves after a push that keeps the manifest byte for byte:
# `skopeo copy --preserve-digests oci-archive:FILE docker://REG/REPO:TAG`, or
# `scripts/release-build.sh REG/REPO:TAG`, which pushes that way, checks the
# served digest and bakes it into the provider. (`podman push` re-serialises
# the manifest and would serve another digest.) The last line of stdout is
# the path of an env file naming all of it (BUZZ_SPRIG_IMAGE, _ID, _DIGEST,
# _ARCHIVE, and the podman storage settings); progress goes to stderr.
#
# With a registry you can build instead with
#   docker build $(scripts/pin-bases.sh) -f images/sprig/Containerfile .
# (README, "Image").
#
#   BUZZ_IMAGE_CACHE    cache root (default: ${XDG_CACHE_HOME:-~/.cache}/buzz-image)
#   CARGO_TARGET_DIR    where cargo builds (default: ./target)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
say() { printf 'image-build: %s\n' "$*" >&2; }
die() { printf 'image-build: %s\n' "$*" >&2; exit 1; }

# --- prerequisites -------------------------------------------------------------
missing=()
for c in podman buildah runc mmdebstrap; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]} (podman buildah runc mmdebstrap uidmap)"
    (apt-get install -y podman buildah runc mmdebstrap uidmap ||
      (apt-get update && apt-get install -y podman buildah runc mmdebstrap uidmap)) >&2
  else
    die "missing: ${missing[*]}. fix: sudo apt-get update && sudo apt-get install -y podman buildah runc mmdebstrap uidmap"
  fi
fi
if [[ $(id -u) -ne 0 ]]; then
  die "the offline build runs podman as root (containers.md); rootless storage is not set up by this script. fix: sudo $0"
fi
command -v strip >/dev/null 2>&1 || die "strip missing. fix: apt-get update && apt-get install -y binutils"

# shellcheck source=podman-env.sh
. "$root/scripts/podman-env.sh"
start=$(date +%s)

# --- 1. base rootfs, cached by package set -----------------------------------
suite=bookworm
variant=essential
packages=bash,git,ca-certificates
excludes=('/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*' '/usr/share/lintian/*')
base_key="$(printf '%s|' v1 "$suite" "$variant" "$packages" "${excludes[@]}" | sha256sum | cut -c1-12)"
base_image="localhost/buzz-sprig-base:$base_key"
base_tar="$BUZZ_IMAGE_CACHE/base/sprig-base-$base_key.tar"
if ! buzz_podman image exists "$base_image"; then
  if [[ ! -s $base_tar ]]; then
    say "base rootfs: mmdebstrap --variant=$variant --include=$packages $suite (about a minute)"
    mkdir -p "$(dirname "$base_tar")"
    dpkgopts=()
    for e in "${excludes[@]}"; do dpkgopts+=(--dpkgopt="path-exclude=$e"); done
    # mmdebstrap picks the output format from the file name: keep ".tar" last.
    part="${base_tar%.tar}.part.tar"
    rm -rf "$part"
    mmdebstrap --quiet --variant="$variant" --include="$packages" "${dpkgopts[@]}" \
      "$suite" "$part" >&2
    mv "$part" "$base_tar"
  fi
  buzz_podman import --quiet "$base_tar" "$base_image" >/dev/null
fi
say "base $base_image"

# --- 2. static binaries --------------------------------------------------------
target="$(rustc -vV | sed -n 's/^host: //p')"
bins=(buzz-acp runtime-agent)
pkgs=()
for b in "${bins[@]}"; do pkgs+=(-p "$b"); done
say "static release build of ${bins[*]} ($target, +crt-static)"
RUSTFLAGS='-C target-feature=+crt-static' cargo build --quiet --release --locked --target "$target" "${pkgs[@]}" >&2
target_dir="${CARGO_TARGET_DIR:-$root/target}"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/prebuilt" "$ctx/images"
cp -a images/sprig "$ctx/images/sprig"
for b in "${bins[@]}"; do
  install -m 0755 "$target_dir/$target/release/$b" "$ctx/prebuilt/$b"
  strip "$ctx/prebuilt/$b"
  file_out="$(file -b "$ctx/prebuilt/$b" 2>/dev/null || true)"
  [[ -z $file_out || $file_out == *static* ]] || die "$b is not statically linked: $file_out"
done

# --- 3. the image, keyed by everything that goes into it -----------------------
tag="$( (echo "$base_key"; cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-12)"
image="localhost/buzz-sprig:$tag"
if ! buzz_podman image exists "$image"; then
  say "building $image"
  # --timestamp 0: file times and the created date are fixed, so the same
  # inputs give the same layers and the same digest.
  buzz_buildah bud --quiet --isolation chroot --timestamp 0 --pull=false \
    --build-arg BUILD_BASE="$base_image" --build-arg RUNTIME_BASE="$base_image" \
    --build-arg INSTALL_PACKAGES=0 \
    -t "$image" -f "$ctx/images/sprig/Containerfile" "$ctx" >&2
fi
image_id="$(buzz_podman image inspect --format '{{.Id}}' "$image")"

# --- 4. the OCI archive, and the one digest every pull path agrees on ----------
# podman's own digest (`{{.Digest}}`) is known only to podman's storage: the
# archive's manifest is serialised anew, so a registry the archive is pushed
# to, and a containerd that imports it, know the image by the archive's
# manifest digest instead. That digest is the image's digest here: it is
# what BUZZ_SPRIG_IMAGE_DIGEST records and what release-build.sh bakes, and
# podman learns it too (the archive is pulled back into the same storage,
# which adds the digest to the same image ID).
out="$BUZZ_IMAGE_CACHE/out"
archive="$out/buzz-sprig-$tag.oci.tar"
mkdir -p "$out"
if [[ ! -s $archive ]]; then
  buzz_podman save --quiet --format oci-archive -o "$archive.part" "$image"
  mv "$archive.part" "$archive"
fi
digest="$(tar -xOf "$archive" index.json | sed -n 's/.*"digest":"\(sha256:[0-9a-f]\{64\}\)".*/\1/p')"
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "cannot read the manifest digest of $archive"
repo="${image%:*}"
if ! buzz_podman image inspect "$repo@$digest" >/dev/null 2>&1; then
  buzz_podman pull --quiet "oci-archive:$archive" >/dev/null
fi
pulled_id="$(buzz_podman image inspect --format '{{.Id}}' "$repo@$digest" 2>/dev/null || true)"
[[ $pulled_id == "$image_id" ]] ||
  die "podman does not resolve $repo@$digest to $image_id (got '${pulled_id:-nothing}'); remove $archive and rebuild"

env_file="$BUZZ_IMAGE_CACHE/image.env"
cat >"$env_file" <<ENV
BUZZ_SPRIG_IMAGE=$image
BUZZ_SPRIG_IMAGE_ID=$image_id
BUZZ_SPRIG_IMAGE_DIGEST=$digest
BUZZ_SPRIG_IMAGE_ARCHIVE=$archive
BUZZ_PODMAN_ROOT=$BUZZ_PODMAN_ROOT
BUZZ_PODMAN_RUNROOT=$BUZZ_PODMAN_RUNROOT
CONTAINERS_CONF=$CONTAINERS_CONF
ENV
say "image   $image"
say "id      $image_id"
say "digest  $digest  (the archive's manifest digest: pin it as localhost/buzz-sprig@$digest,"
say "        or as REGISTRY/REPO@$digest once pushed with scripts/release-build.sh REGISTRY/REPO:TAG)"
say "archive $archive"
say "done in $(( $(date +%s) - start )) s"
echo "$env_file"
