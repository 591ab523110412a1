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
# _ARCHIVE, _SIZE and _ARCHIVE_SIZE in bytes, and the podman storage
# settings); progress goes to stderr.
#
# With a registry you can build instead with
#   docker build $(scripts/pin-bases.sh) -f images/sprig/Containerfile .
# (README, "Image").
#
# --- agent variants -------------------------------------------------------------
#   scripts/image-build.sh --agent claude|codex|gemini
#
# builds (or reuses) the sprig image exactly as above (same image, same digest,
# same image.env), then `buzz-sprig-NAME` on top of it: one more layer
# (images/sprig-agent/Containerfile) with Debian's Node.js and the preset's
# pinned npm package, laid out as `npm install -g` does, so the preset's
# command (`claude-agent-acp`, `codex-acp`, `gemini`) is /usr/local/bin/NAME,
# on the image's PATH: a deploy carries only the name. The preset's command
# and its pin are read from buzz-contract/src/agents.rs (`PRESETS`), nothing
# is repeated here.
#   - Node.js: Debian's `nodejs` plus `libssl3`/`zlib1g` (codex-acp's native
#     binary links them), the .debs downloaded on the host by apt against the
#     sprig rootfs's own dpkg status (only what the base lacks) and installed
#     by dpkg in the build; no fetch happens inside the build. claude and codex
#     take bookworm's Node 18, like the base; gemini takes trixie's Node 20
#     (gemini-cli 0.61 requires Node >= 20 and does not parse on 18), which
#     also brings trixie's libc6, libstdc++6 and libssl3t64 into that variant.
#   - The npm package: `npm install -g --prefix STAGE --ignore-scripts PKG@PIN`
#     with the host's npm (the npm registry is the only fetch), staged once per
#     pin and copied into the image.
#   - Cached per variant, tagged by every input: the base digest, the Node
#     package set with each .deb's sha256, the pin and the staged tree's hash,
#     and the Containerfile.
#   - Digest-pinned like the base: its own OCI archive and manifest digest,
#     and its own env file, $BUZZ_IMAGE_CACHE/image-NAME.env, the last line of
#     stdout (image.env still names the base). For claude it holds
#       BUZZ_SPRIG_CLAUDE_IMAGE            localhost/buzz-sprig-claude:<tag>
#       BUZZ_SPRIG_CLAUDE_IMAGE_ID         the image ID
#       BUZZ_SPRIG_CLAUDE_IMAGE_DIGEST     the archive's manifest digest
#       BUZZ_SPRIG_CLAUDE_IMAGE_ARCHIVE    the OCI archive
#       BUZZ_SPRIG_CLAUDE_IMAGE_SIZE       bytes, uncompressed (as podman stores it)
#       BUZZ_SPRIG_CLAUDE_IMAGE_ARCHIVE_SIZE  bytes of the archive
#       BUZZ_SPRIG_CLAUDE_AGENT_COMMAND    claude-agent-acp
#       BUZZ_SPRIG_CLAUDE_AGENT_NPM        @zed-industries/claude-agent-acp@0.23.1
#       BUZZ_SPRIG_CLAUDE_NODE             nodejs=<Debian version>
#       BUZZ_SPRIG_CLAUDE_BASE_IMAGE_DIGEST  the sprig digest it is built on
#     and the podman storage settings (CODEX_, GEMINI_ likewise). Both sizes
#     are also printed on stderr.
#
#   BUZZ_IMAGE_CACHE    cache root (default: ${XDG_CACHE_HOME:-~/.cache}/buzz-image)
#   CARGO_TARGET_DIR    where cargo builds (default: ./target)
#   BUZZ_STATIC_PROFILE the binaries' cargo profile (default dist; scripts/static-build.sh)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
say() { printf 'image-build: %s\n' "$*" >&2; }
die() { printf 'image-build: %s\n' "$*" >&2; exit 1; }

agent=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --agent) [[ $# -ge 2 ]] || die "--agent needs a name (claude, codex or gemini)"; agent=$2; shift 2 ;;
    --agent=*) agent=${1#--agent=}; shift ;;
    *) die "usage: scripts/image-build.sh [--agent claude|codex|gemini]" ;;
  esac
done
if [[ -n $agent ]]; then
  # The preset's command and npm pin, from the one table that holds them.
  [[ $agent =~ ^[a-z][a-z0-9-]*$ ]] || die "--agent: not a preset name: '$agent'"
  presets="$root/buzz-contract/src/agents.rs"
  preset_block="$(sed -n "/^[[:space:]]*name: \"$agent\",/,/^[[:space:]]*},/p" "$presets")"
  [[ -n $preset_block ]] || die "--agent $agent: no such preset in $presets"
  agent_command="$(sed -n 's/^[[:space:]]*command: "\([^"]*\)",.*/\1/p' <<<"$preset_block")"
  npm_pkg="$(sed -n 's/^[[:space:]]*npm: Some(("\([^"]*\)", "\([^"]*\)")),.*/\1/p' <<<"$preset_block")"
  npm_ver="$(sed -n 's/^[[:space:]]*npm: Some(("\([^"]*\)", "\([^"]*\)")),.*/\2/p' <<<"$preset_block")"
  [[ -n $agent_command && $agent_command != */* ]] || die "--agent $agent: no command name in $presets"
  [[ -n $npm_pkg && $npm_ver =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] ||
    die "--agent $agent: the preset has no npm pin in $presets (only npm-installed agents get an image)"
  command -v npm >/dev/null 2>&1 || die "npm missing (it stages the agent's package). fix: apt-get update && apt-get install -y npm"
  command -v apt-get >/dev/null 2>&1 || die "apt-get missing: the agent images take Node.js from Debian's packages"
fi

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
# The smallest rootfs that still holds what the image promises (issue 22 part
# 1: <= 60 MB uncompressed, <= 25 MB compressed; spec §Image): bash, git with
# https remotes, CA certificates, the tools an agent's shell uses, and dpkg
# (the agent variants below install Node.js with it). Each step, measured as
# the whole image (podman's size; the OCI archive this script writes), MiB:
#
#   step                                                      image  archive
#   --variant=essential + bash,git,ca-certificates (before)   163.7   63.8
#   --variant=custom, the package set below (no util-linux,
#     login/PAM, systemd libraries, ncurses, usrmerge)         152.6   59.5
#   perl, perl-base, debconf, git-man, liberror-perl purged
#     (rootfs-trim.sh); /usr/bin/git a symlink, not a copy     94.6   43.8
#   git's server-side and perl-only commands, gitweb,
#     bash-completion excluded (git_excludes)                  75.3   33.7
#   glibc's gconv modules and libmvec, localedef, zic,
#     iconvconfig excluded (libc_excludes)                     66.1   30.2
#   gettext-base's envsubst for git's shell i18n, in place of
#     git's 2 MB git-sh-i18n--envsubst                         64.2   29.2
#   dpkg's database trimmed, debconf's cache, the sasldb
#     plugin and libdb5.3 purged                               60.4   27.9
#   busybox's applets in place of GNU coreutils                54.3   25.3
#   + tree (the spec's agent tool)                             54.4   25.3
#   buzz-acp and runtime-agent with fat LTO, one codegen unit  50.8   24.1
#   (ripgrep would add 4.4 / 1.8, past the archive goal: left out,
#   README "Known gaps of the image")
#
# Cached by everything that shapes it: the suite, the package set, the
# excludes, mmdebstrap's merged-/usr setup hook and images/sprig/rootfs-trim.sh
# (the customize hook that purges and links).
suite=bookworm
variant=custom
# custom: exactly these and their dependencies. coreutils and debconf are
# here to configure the others; rootfs-trim.sh removes them afterwards.
packages=(base-files base-passwd usr-is-merged dpkg tar libc-bin dash bash busybox coreutils
  debianutils sed grep findutils diffutils gzip mawk git ca-certificates gettext-base tree)
# Merged /usr (/bin -> usr/bin, ...), as every bookworm system and the
# essential variant have it: trixie's base-files refuses to install without
# it (the gemini variant). The custom variant runs no essential hook, so the
# links come from mmdebstrap's own setup hook, and usr-is-merged from the
# package set replaces the dummy it installs.
merged_usr_hook=/usr/share/mmdebstrap/hooks/merged-usr/setup00.sh
docs_excludes=('/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*'
  '/usr/share/lintian/*' '/usr/share/bash-completion/*')
# git: the second copy of the git binary (rootfs-trim.sh links it), the
# server side (daemon, http-backend, shell, scalar), dumb-HTTP push and
# packfile-URI fetch, imap-send, and what needs perl (add--interactive, the
# fallback of the builtin `add -i`; instaweb, request-pull, gitweb, contrib).
git_excludes=(/usr/bin/git /usr/bin/git-shell /usr/bin/scalar /usr/lib/git-core/scalar
  /usr/lib/git-core/git-shell /usr/lib/git-core/git-daemon /usr/lib/git-core/git-http-backend
  /usr/lib/git-core/git-http-push /usr/lib/git-core/git-http-fetch /usr/lib/git-core/git-imap-send
  /usr/lib/git-core/git-add--interactive /usr/lib/git-core/git-instaweb
  /usr/lib/git-core/git-request-pull /usr/lib/git-core/git-sh-i18n--envsubst
  '/usr/share/gitweb/*' '/usr/share/git-core/contrib/*' '/usr/share/perl5/Git*')
# glibc: the iconv modules (UTF-8, UTF-16/32 and ASCII are built in), libmvec
# (nothing here links it), and the locale and time-zone compilers.
libc_excludes=('/usr/lib/*/gconv/*' '/lib/*/libmvec.so.1' '/usr/lib/*/libmvec.so.1'
  /usr/bin/localedef /usr/sbin/zic /usr/sbin/iconvconfig)
# The excludes stay in the rootfs's dpkg.cfg.d, so a later `dpkg -i` (the
# agent variants, an image built FROM this one) skips the same paths.
excludes=("${docs_excludes[@]}" "${git_excludes[@]}" "${libc_excludes[@]}")
trim_hook="$root/images/sprig/rootfs-trim.sh"
[[ -x $merged_usr_hook ]] || die "$merged_usr_hook missing (mmdebstrap too old?). fix: apt-get install -y mmdebstrap"
base_key="$( (printf '%s|' v2 "$suite" "$variant" "${packages[@]}" "${excludes[@]}"
  cat "$merged_usr_hook" "$trim_hook") | sha256sum | cut -c1-12)"
base_image="localhost/buzz-sprig-base:$base_key"
base_tar="$BUZZ_IMAGE_CACHE/base/sprig-base-$base_key.tar"
if ! buzz_podman image exists "$base_image"; then
  if [[ ! -s $base_tar ]]; then
    say "base rootfs: mmdebstrap --variant=$variant $suite, ${#packages[@]} packages, trimmed by $(basename "$trim_hook") (about a minute)"
    mkdir -p "$(dirname "$base_tar")"
    dpkgopts=()
    for e in "${excludes[@]}"; do dpkgopts+=(--dpkgopt="path-exclude=$e"); done
    # mmdebstrap picks the output format from the file name: keep ".tar" last.
    part="${base_tar%.tar}.part.tar"
    rm -rf "$part"
    mmdebstrap --quiet --variant="$variant" --include="$(IFS=,; echo "${packages[*]}")" "${dpkgopts[@]}" \
      --setup-hook="$merged_usr_hook" --customize-hook="$trim_hook" "$suite" "$part" >&2
    mv "$part" "$base_tar"
  fi
  buzz_podman import --quiet "$base_tar" "$base_image" >/dev/null
fi
say "base $base_image"

# --- 2. static binaries --------------------------------------------------------
# scripts/static-build.sh: the one build of the shipped binaries (profile
# `dist`, fat LTO with one codegen unit: the same code, 3.5 MiB smaller, 1.1
# MiB in the archive), shared with release-build.sh's provider. The suite
# sets BUZZ_STATIC_PROFILE=suite (the dev profile's code): another image, with
# its own tag and digest, from the same sources. image.env names the last
# one built.
bins=(buzz-acp runtime-agent)
bin_dir="$("$root/scripts/static-build.sh" "${bins[@]}" | tail -n 1)"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/prebuilt" "$ctx/images"
cp -a images/sprig "$ctx/images/sprig"
for b in "${bins[@]}"; do
  install -m 0755 "$bin_dir/$b" "$ctx/prebuilt/$b"
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
mkdir -p "$out"
# pin IMAGE IMAGE_ID ARCHIVE: writes the archive once, sets `digest` to its
# manifest digest and makes podman resolve REPO@digest to IMAGE_ID.
pin() {
  local image=$1 image_id=$2 archive=$3 repo pulled_id
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
}
archive="$out/buzz-sprig-$tag.oci.tar"
pin "$image" "$image_id" "$archive"
# MiB, one decimal: the unit of the goals and of every figure in the README.
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1048576 }'; }
size="$(buzz_podman image inspect --format '{{.Size}}' "$image")"
archive_size="$(stat -c %s "$archive")"

env_file="$BUZZ_IMAGE_CACHE/image.env"
cat >"$env_file" <<ENV
BUZZ_SPRIG_IMAGE=$image
BUZZ_SPRIG_IMAGE_ID=$image_id
BUZZ_SPRIG_IMAGE_DIGEST=$digest
BUZZ_SPRIG_IMAGE_ARCHIVE=$archive
BUZZ_SPRIG_IMAGE_SIZE=$size
BUZZ_SPRIG_IMAGE_ARCHIVE_SIZE=$archive_size
BUZZ_PODMAN_ROOT=$BUZZ_PODMAN_ROOT
BUZZ_PODMAN_RUNROOT=$BUZZ_PODMAN_RUNROOT
CONTAINERS_CONF=$CONTAINERS_CONF
ENV
say "image   $image"
say "id      $image_id"
say "digest  $digest  (the archive's manifest digest: pin it as localhost/buzz-sprig@$digest,"
say "        or as REGISTRY/REPO@$digest once pushed with scripts/release-build.sh REGISTRY/REPO:TAG)"
say "archive $archive"
say "size    image $(mb "$size") uncompressed (goal <= 60 MB), archive $(mb "$archive_size") (goal <= 25 MB)"
say "done in $(( $(date +%s) - start )) s"
if [[ -z $agent ]]; then
  echo "$env_file"
  exit 0
fi

# --- 5. an agent variant on top of the sprig image (--agent) --------------------
astart=$(date +%s)
base_digest=$digest
base_pinned="${image%:*}@$digest"
AGENT_UPPER="$(tr 'a-z-' 'A-Z_' <<<"$agent")"
# One variant build at a time per agent (the caches below are shared).
mkdir -p "$BUZZ_IMAGE_CACHE/agents"
exec {agent_lock}>"$BUZZ_IMAGE_CACHE/agents/$agent.lock"
flock "$agent_lock"

# 5a. Debian's Node.js: the .debs the sprig rootfs lacks, cached by package set.
# apt runs on the host against a private state directory holding the image's
# own dpkg status and apt sources (the way mmdebstrap drives apt), so it
# downloads exactly what the image is missing; dpkg installs them in the build.
case $agent in
  # gemini-cli 0.61 requires Node >= 20 (its bundle does not parse on 18);
  # Debian has Node 20 only from trixie on.
  gemini) node_suite=trixie; node_packages=(nodejs libssl3t64 zlib1g) ;;
  *) node_suite=$suite; node_packages=(nodejs libssl3 zlib1g) ;;
esac
arch="$(dpkg --print-architecture)"
if [[ -s $base_tar ]]; then
  base_status="$(tar -xOf "$base_tar" ./var/lib/dpkg/status)"
  base_sources="$(tar -xOf "$base_tar" ./etc/apt/sources.list)"
else
  base_cat() {
    buzz_podman run --rm --network=none --ulimit nofile=10000:10000 --ulimit nproc=10000:10000 \
      --entrypoint /bin/cat "$image" "$1"
  }
  base_status="$(base_cat /var/lib/dpkg/status)"
  base_sources="$(base_cat /etc/apt/sources.list)"
fi
node_sources="$base_sources"
if [[ $node_suite != "$suite" ]]; then
  node_sources+=$'\n'"$(sed "s/\b$suite\b/$node_suite/g" <<<"$base_sources")"
fi
node_key="$( (printf '%s|' v1 "$arch" "$node_suite" "${node_packages[@]}"; echo "$node_sources"; echo "$base_status") |
  sha256sum | cut -c1-12)"
debs="$BUZZ_IMAGE_CACHE/agents/debs-$node_suite-$node_key"
if [[ ! -s $debs/SHA256SUMS ]]; then
  say "node: apt ${node_packages[*]} from $node_suite, against the sprig rootfs's dpkg status"
  aptw="$(mktemp -d)"
  a="$aptw/root"
  mkdir -p "$a/etc/apt/apt.conf.d" "$a/etc/apt/preferences.d" "$a/etc/apt/sources.list.d" \
    "$a/var/lib/apt/lists/partial" "$a/var/cache/apt/archives/partial" "$a/var/lib/dpkg" "$aptw/trusted.d"
  printf '%s\n' "$base_status" >"$a/var/lib/dpkg/status"
  : >"$a/var/lib/dpkg/available"
  printf '%s\n' "$node_sources" >"$a/etc/apt/sources.list"
  if [[ $node_suite != "$suite" ]]; then
    # Prefer the other suite (and its updates) for what the install needs; the
    # highest version among them wins, so security updates are taken.
    for r in "$node_suite" "$node_suite-updates" "$node_suite-security"; do
      printf 'Package: *\nPin: release n=%s\nPin-Priority: 990\n\n' "$r"
    done >"$a/etc/apt/preferences.d/$node_suite"
  fi
  cat >"$aptw/apt.conf" <<APT
Dir "$a/";
Dir::State::status "$a/var/lib/dpkg/status";
Dir::Etc::Trusted "/usr/share/keyrings/debian-archive-keyring.gpg";
Dir::Etc::TrustedParts "$aptw/trusted.d/";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
APT::Sandbox::User "root";
Debug::NoLocking "true";
APT
  apt_() { APT_CONFIG="$aptw/apt.conf" apt-get -q "$@"; }
  apt_ update >&2
  rm -rf "$debs.part"
  mkdir -p "$debs.part"
  # What apt would remove on the way (trixie's libssl3t64 replaces libssl3):
  # the build purges these before it installs the .debs.
  apt_ -s install "${node_packages[@]}" | sed -n 's/^Remv \([^ ]*\) .*/\1/p' >"$debs.part/remove"
  apt_ -y --download-only install "${node_packages[@]}" >&2
  mv "$a/var/cache/apt/archives/"*.deb "$debs.part/"
  (cd "$debs.part" && sha256sum -- *.deb) >"$debs.part/SHA256SUMS"
  rm -rf "$aptw" "$debs"
  mv "$debs.part" "$debs"
fi
node_deb="$(cd "$debs" && ls nodejs_*.deb 2>/dev/null || true)"
[[ -n $node_deb ]] || die "no nodejs .deb in $debs (the base has Node.js already?); remove $debs and rebuild"
node_version="$(sed 's/^nodejs_\([^_]*\)_.*/\1/; s/%3a/:/' <<<"$node_deb")"
replaced="$(tr '\n' ' ' <"$debs/remove" | sed 's/ $//')"
say "node $node_suite nodejs=$node_version ($(wc -l <"$debs/SHA256SUMS") .debs${replaced:+, replacing $replaced})"

# 5b. The pinned npm package, staged once per pin with the host's npm.
node_platform="$(node -p 'process.platform + "-" + process.arch')"
npm_key="$(printf '%s|' v1 "$npm_pkg" "$npm_ver" "$node_platform" ignore-scripts | sha256sum | cut -c1-12)"
stage="$BUZZ_IMAGE_CACHE/agents/npm-$agent-$npm_ver-$npm_key"
if [[ ! -s $stage.tree ]]; then
  say "npm: install -g --prefix ... $npm_pkg@$npm_ver ($node_platform)"
  rm -rf "$stage.part" "$stage"
  # --ignore-scripts: no package's install script runs on the host; every agent
  # here ships prebuilt (gemini's optional node-pty/keytar builds are skipped,
  # as measured in real-agents.md).
  npm install --global --prefix "$stage.part" --cache "$BUZZ_IMAGE_CACHE/agents/npm-cache" \
    --ignore-scripts --no-audit --no-fund --no-update-notifier --loglevel=error \
    "$npm_pkg@$npm_ver" >&2
  [[ -L $stage.part/bin/$agent_command || -x $stage.part/bin/$agent_command ]] ||
    die "$npm_pkg@$npm_ver installed no bin/$agent_command (got: $(ls "$stage.part/bin" 2>/dev/null | tr '\n' ' '))"
  mv "$stage.part" "$stage"
  tar -C "$stage" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . |
    sha256sum | cut -c1-64 >"$stage.tree"
fi
say "npm  $npm_pkg@$npm_ver -> /usr/local/bin/$agent_command (tree $(cut -c1-12 "$stage.tree"))"

# 5c. The variant image, tagged by every input.
acontainerfile="$root/images/sprig-agent/Containerfile"
atag="$( (printf '%s|' v1 "$agent" "$agent_command" "$npm_pkg@$npm_ver" "$base_digest" "$node_suite" \
  "${node_packages[@]}"; cat "$debs/SHA256SUMS" "$debs/remove" "$stage.tree" "$acontainerfile") |
  sha256sum | cut -c1-12)"
aimage="localhost/buzz-sprig-$agent:$atag"
if ! buzz_podman image exists "$aimage"; then
  say "building $aimage on $base_pinned"
  # The context holds hard links into the caches (same file system), not copies.
  actx="$(mktemp -d "$BUZZ_IMAGE_CACHE/agents/ctx.XXXXXX")"
  trap 'rm -rf "$ctx" "$actx"' EXIT
  cp "$acontainerfile" "$actx/Containerfile"
  cp -al "$debs" "$actx/debs" 2>/dev/null || cp -a "$debs" "$actx/debs"
  cp -al "$stage" "$actx/agent" 2>/dev/null || cp -a "$stage" "$actx/agent"
  buzz_buildah bud --quiet --isolation chroot --timestamp 0 --pull=false \
    --build-arg BASE="$base_pinned" --build-arg BASE_DIGEST="$base_digest" \
    --build-arg AGENT="$agent" --build-arg AGENT_COMMAND="$agent_command" \
    --build-arg AGENT_NPM="$npm_pkg@$npm_ver" \
    -t "$aimage" -f "$actx/Containerfile" "$actx" >&2
  rm -rf "$actx"
fi
aimage_id="$(buzz_podman image inspect --format '{{.Id}}' "$aimage")"
aarchive="$out/buzz-sprig-$agent-$atag.oci.tar"
pin "$aimage" "$aimage_id" "$aarchive"
adigest=$digest

# 5d. Sizes and the env file.
asize="$(buzz_podman image inspect --format '{{.Size}}' "$aimage")"
bsize=$size
aarchive_size="$(stat -c %s "$aarchive")"
aenv_file="$BUZZ_IMAGE_CACHE/image-$agent.env"
cat >"$aenv_file.part" <<ENV
BUZZ_SPRIG_${AGENT_UPPER}_IMAGE=$aimage
BUZZ_SPRIG_${AGENT_UPPER}_IMAGE_ID=$aimage_id
BUZZ_SPRIG_${AGENT_UPPER}_IMAGE_DIGEST=$adigest
BUZZ_SPRIG_${AGENT_UPPER}_IMAGE_ARCHIVE=$aarchive
BUZZ_SPRIG_${AGENT_UPPER}_IMAGE_SIZE=$asize
BUZZ_SPRIG_${AGENT_UPPER}_IMAGE_ARCHIVE_SIZE=$aarchive_size
BUZZ_SPRIG_${AGENT_UPPER}_AGENT_COMMAND=$agent_command
BUZZ_SPRIG_${AGENT_UPPER}_AGENT_NPM=$npm_pkg@$npm_ver
BUZZ_SPRIG_${AGENT_UPPER}_NODE=nodejs=$node_version
BUZZ_SPRIG_${AGENT_UPPER}_BASE_IMAGE_DIGEST=$base_digest
BUZZ_PODMAN_ROOT=$BUZZ_PODMAN_ROOT
BUZZ_PODMAN_RUNROOT=$BUZZ_PODMAN_RUNROOT
CONTAINERS_CONF=$CONTAINERS_CONF
ENV
mv "$aenv_file.part" "$aenv_file"
say "agent   $aimage ($agent_command from $npm_pkg@$npm_ver, nodejs=$node_version)"
say "id      $aimage_id"
say "digest  $adigest  (pin it as ${aimage%:*}@$adigest)"
say "archive $aarchive"
say "size    image $(mb "$asize") uncompressed (the sprig base $(mb "$bsize") + $(mb $((asize - bsize)))), archive $(mb "$aarchive_size")"
say "done in $(( $(date +%s) - astart )) s (the variant), $(( $(date +%s) - start )) s in all"
echo "$aenv_file"
