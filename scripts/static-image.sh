#!/usr/bin/env bash
# Builds one of the test node's own images (the pause image, the volume
# helper) as a one-layer OCI archive, byte for byte reproducible: a static
# /NAME from the given C source as the entrypoint, a tar with fixed owners and
# times, and the config, manifest and index written here.
#
#   scripts/static-image.sh SOURCE.c OUT.oci.tar NAME USER
#   (the pause image: NAME pause, USER 65535:65535)
set -euo pipefail
src="$1"; out="$2"; name="$3"; user="$4"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root" "$work/oci/blobs/sha256"
cc -static -Os -s -o "$work/root/$name" "$src"
tar_fixed() { tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime "$@"; }
tar_fixed -C "$work/root" -cf "$work/layer.tar" "$name"
blob() { # file -> prints digest hex, stores the blob
  local d; d="$(sha256sum "$1" | cut -d' ' -f1)"
  cp "$1" "$work/oci/blobs/sha256/$d"; echo "$d"
}
size() { stat -c %s "$1"; }
layer="$(blob "$work/layer.tar")"
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/%s"],"User":"%s"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$name" "$user" "$layer" >"$work/config.json"
config="$(blob "$work/config.json")"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$config" "$(size "$work/config.json")" "$layer" "$(size "$work/layer.tar")" >"$work/manifest.json"
manifest="$(blob "$work/manifest.json")"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"local"}}]}' \
  "$manifest" "$(size "$work/manifest.json")" >"$work/oci/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
tar_fixed -C "$work/oci" -cf "$out" oci-layout index.json blobs
