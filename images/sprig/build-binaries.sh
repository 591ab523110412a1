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
target="$(rustc -vV | sed -n 's/^host: //p')"
packages=()
for b in "${bins[@]}"; do packages+=(-p "$b"); done
# An explicit --target keeps build scripts and proc-macros dynamic while the
# shipped binaries link glibc statically.
RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --locked --target "$target" "${packages[@]}"
for b in "${bins[@]}"; do
  install -m 0755 "target/$target/release/$b" "$out/$b"
  strip "$out/$b"
done
