#!/bin/bash
# Build stage of images/sprig/Containerfile: puts the image's static binaries
# into OUT. An offline build passes them in as prebuilt/ (scripts/image-build.sh
# builds them on the host); otherwise they are built here with cargo.
set -euo pipefail
out=${1:?usage: build-binaries.sh OUT}
bins=(buzz-acp runtime-agent)
mkdir -p "$out"
# cp + chmod, not install(1): the offline base has busybox's commands, and
# Debian's busybox has no `install` (images/sprig/rootfs-trim.sh).
if [[ -d prebuilt ]]; then
  for b in "${bins[@]}"; do cp "prebuilt/$b" "$out/$b" && chmod 0755 "$out/$b"; done
  exit 0
fi
# scripts/static-build.sh: the one build of the shipped binaries (profile
# `dist`, +crt-static, the host's triple), the same as the offline build's.
bin_dir="$(bash scripts/static-build.sh "${bins[@]}" | tail -n 1)"
for b in "${bins[@]}"; do
  install -m 0755 "$bin_dir/$b" "$out/$b"
  strip "$out/$b"
done
