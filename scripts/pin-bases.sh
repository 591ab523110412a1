#!/usr/bin/env bash
# Prints the --build-arg flags that pin images/sprig/Containerfile's public
# bases by digest, from images/sprig/bases.lock, for a build with a registry:
#
#   docker build $(scripts/pin-bases.sh) -f images/sprig/Containerfile .
#
#   scripts/pin-bases.sh --refresh   resolves each tag in the lock to its
#                                    current manifest digest (skopeo, crane or
#                                    docker buildx, whichever is installed)
#                                    and rewrites the lock; commit the result.
#
# A lock line whose digest is "-" stops the build here: a base that was not
# pinned by digest is never silently pulled by tag (spec §Image).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lock="$root/images/sprig/bases.lock"
die() { printf 'pin-bases: %s\n' "$*" >&2; exit 1; }

resolve() {
  local ref=$1
  if command -v skopeo >/dev/null 2>&1; then
    skopeo inspect --format '{{.Digest}}' "docker://$ref"
  elif command -v crane >/dev/null 2>&1; then
    crane digest "$ref"
  elif command -v docker >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1; then
    docker buildx imagetools inspect --format '{{json .Manifest.Digest}}' "$ref" | tr -d '"'
  else
    die "no resolver: install skopeo (apt-get install -y skopeo), crane or docker buildx"
  fi
}

if [[ ${1:-} == --refresh ]]; then
  tmp="$(mktemp)"
  while IFS= read -r line; do
    if [[ $line =~ ^([A-Z_]+)[[:space:]]+([^[:space:]]+)[[:space:]]+([^[:space:]]+)$ ]]; then
      digest="$(resolve "${BASH_REMATCH[2]}")" || die "cannot resolve ${BASH_REMATCH[2]} (is a registry reachable?)"
      [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "${BASH_REMATCH[2]} resolved to '$digest', not a sha256 digest"
      printf '%-15s %-40s %s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "$digest" >>"$tmp"
    else
      printf '%s\n' "$line" >>"$tmp"
    fi
  done <"$lock"
  mv "$tmp" "$lock"
  echo "pin-bases: rewrote $lock" >&2
  exit 0
fi

flags=()
while IFS= read -r line; do
  [[ $line =~ ^([A-Z_]+)[[:space:]]+([^[:space:]]+)[[:space:]]+([^[:space:]]+)$ ]] || continue
  arg=${BASH_REMATCH[1]} ref=${BASH_REMATCH[2]} digest=${BASH_REMATCH[3]}
  [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] ||
    die "$arg ($ref) is not pinned by digest in $lock. fix: scripts/pin-bases.sh --refresh (needs a registry), or build offline with scripts/image-build.sh"
  flags+=(--build-arg "$arg=$ref@$digest")
done <"$lock"
[[ ${#flags[@]} -eq 2 ]] || die "$lock must pin BUILD_BASE and RUNTIME_BASE"
echo "${flags[@]}"
