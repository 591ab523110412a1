#!/bin/bash
# The mmdebstrap customize hook of scripts/image-build.sh (issue 22 part 1:
# the sprig image at <= 60 MB, <= 25 MB compressed). It runs on the host, as
# root, once every package of the rootfs at $1 is unpacked and configured,
# and takes out what the image does not run:
#
#   1. A stand-in package, `buzz-sprig-omitted`, that Provides the removed
#      packages others still depend on, at their exact versions: git's perl,
#      liberror-perl and git-man, ca-certificates' debconf, libsasl2's
#      sasldb module, coreutils. The dpkg status stays consistent, so apt can
#      still resolve against it (the agent variants' Node.js .debs) and dpkg
#      can still install into the image.
#   2. Purges them: perl and its modules (git's perl commands are excluded by
#      image-build.sh's dpkg excludes), debconf and perl-base (needed only to
#      configure ca-certificates, done by now), git-man, libsasl2-modules-db
#      with libdb5.3 (the sasldb plugin; libcurl's LDAP never loads it), and
#      GNU coreutils, whose commands busybox then provides (3).
#   3. busybox applets at every path coreutils had, where busybox has the
#      command (`env`, which the entrypoint runs, among them). Debian's
#      busybox lacks a few (install, nohup, nice, comm, split, printenv, ...):
#      README, "Known gaps of the image".
#   4. /usr/bin/git as a symlink to /usr/lib/git-core/git (Debian ships the
#      same 3.6 MB binary twice; image-build.sh excludes the copy).
#   5. dpkg's database down to what dpkg itself reads (status, file lists,
#      conffiles, triggers, maintainer scripts); debconf's cache.
#   6. `apt-get check` against the result: every remaining dependency holds.
#
# The sizes each step saves are in image-build.sh and the README ("Image").
set -euo pipefail
root=${1:?usage: rootfs-trim.sh ROOTFS (an mmdebstrap customize hook)}
[[ -n ${MMDEBSTRAP_APT_CONFIG:-} ]] || { echo "rootfs-trim.sh: run me as mmdebstrap's --customize-hook" >&2; exit 2; }
say() { printf 'rootfs-trim: %s\n' "$*" >&2; }
in_root() { PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot "$root" "$@"; }
version() { in_root dpkg-query -W -f='${Version}' "$1"; }

# Removed, and provided by the stand-in where something depends on them.
provided=(perl liberror-perl git-man libsasl2-modules-db coreutils)
omitted=("${provided[@]}" perl-modules-5.36 libperl5.36 libgdbm6 libgdbm-compat4 libdb5.3
  debconf perl-base)
stub=buzz-sprig-omitted

# --- 1. the stand-in ---------------------------------------------------------
provides="debconf-2.0"
for p in "${provided[@]}"; do provides+=", $p (= $(version "$p"))"; done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/$stub/DEBIAN"
cat >"$work/$stub/DEBIAN/control" <<CONTROL
Package: $stub
Version: 1
Architecture: all
Maintainer: Buzz image build <noreply@localhost>
Section: misc
Priority: optional
Provides: $provides
Description: stands in for the packages the sprig image leaves out
 The sprig image (images/sprig) removes perl, debconf, git-man,
 libsasl2-modules-db and GNU coreutils after its packages are configured
 (busybox provides the coreutils commands). This package provides them so
 that the dpkg status stays consistent; it installs no files.
CONTROL
dpkg-deb --root-owner-group -Zgzip --build "$work/$stub" "$root/tmp/$stub.deb" >/dev/null
in_root dpkg -i "/tmp/$stub.deb" >/dev/null
rm -f "$root/tmp/$stub.deb"

# --- 2, 3. purge; busybox in coreutils' place ----------------------------------
coreutils_cmds=$(in_root dpkg-query -L coreutils | grep -E '^/(usr/)?s?bin/[^/]+$')
applets=" $(in_root busybox --list | tr '\n' ' ') "
# The maintainer scripts of what is purged last still run `rm`, `basename`...:
# busybox serves them from a PATH entry of its own until coreutils' paths are free.
mkdir -p "$root/tmp/busybox-path"
for a in $applets; do ln -s /bin/busybox "$root/tmp/busybox-path/$a"; done
say "purging ${omitted[*]}"
# (dpkg warns once per essential package it removes: expected, not shown.)
PATH=/usr/sbin:/usr/bin:/sbin:/bin:/tmp/busybox-path chroot "$root" \
  dpkg --purge --force-remove-essential "${omitted[@]}" 2>&1 >/dev/null |
  { grep -v -e 'this is an essential package' -e 'overriding problem because --force' || true; } >&2
rm -rf "$root/tmp/busybox-path"
missing=()
for c in $coreutils_cmds; do
  name=${c##*/}
  if [[ $applets == *" $name "* ]]; then
    [[ -e $root$c || -L $root$c ]] || ln -s /bin/busybox "$root$c"
  else
    missing+=("$name")
  fi
done
say "coreutils commands busybox lacks (left out): ${missing[*]}"
in_root env -i true || { say "busybox env does not run"; exit 1; }

# --- 4. one git binary ---------------------------------------------------------
[[ -e $root/usr/bin/git ]] || ln -s ../lib/git-core/git "$root/usr/bin/git"

# --- 5. dpkg's database, debconf's cache ---------------------------------------
rm -rf "$root/var/cache/debconf"
rm -f "$root"/var/lib/dpkg/info/*.md5sums "$root"/var/lib/dpkg/info/*.symbols \
  "$root"/var/lib/dpkg/info/*.shlibs "$root"/var/lib/dpkg/info/*.templates \
  "$root"/var/lib/dpkg/info/*.config "$root"/var/lib/dpkg/*-old

# --- 6. consistent --------------------------------------------------------------
APT_CONFIG=$MMDEBSTRAP_APT_CONFIG apt-get check -qq
in_root git --version >/dev/null
