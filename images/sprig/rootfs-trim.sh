#!/bin/bash
# The mmdebstrap customize hook of scripts/image-build.sh (issue 22 part 1:
# the sprig image at <= 60 MB, <= 25 MB compressed). It runs on the host, as
# root, once every package of the rootfs at $1 is unpacked and configured,
# and takes out what the image does not run:
#
#   1. The dpkg status of what stays stops naming what goes: a dependency
#      of a remaining package on a purged one (git's perl, liberror-perl and
#      git-man, ca-certificates' debconf, libsasl2's sasldb module) is taken
#      out of that package's recorded Depends, and the list of what was
#      taken out is kept in /usr/share/buzz-sprig/omitted. Nothing claims to
#      provide a purged package, so a later `dpkg -i` of a package that needs
#      perl, debconf or coreutils stops at its dependency check ("dependency
#      problems prevent configuration"), before any maintainer script runs;
#      apt against this status (the agent variants' Node.js .debs) resolves
#      against what is really there (review 9b395e0 finding 8: a stand-in
#      package that Provided them let such a package unpack and then fail in
#      its postinst, half-configured).
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
#   6. `apt-get check` against the result: every remaining dependency holds,
#      and no remaining package names a purged one.
#
# The sizes each step saves are in image-build.sh and the README ("Image").
set -euo pipefail
root=${1:?usage: rootfs-trim.sh ROOTFS (an mmdebstrap customize hook)}
[[ -n ${MMDEBSTRAP_APT_CONFIG:-} ]] || { echo "rootfs-trim.sh: run me as mmdebstrap's --customize-hook" >&2; exit 2; }
say() { printf 'rootfs-trim: %s\n' "$*" >&2; }
in_root() { PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot "$root" "$@"; }

# Purged. Their dependents' recorded dependencies on them are taken out (1).
omitted=(perl liberror-perl git-man libsasl2-modules-db coreutils perl-modules-5.36 libperl5.36
  libgdbm6 libgdbm-compat4 libdb5.3 debconf perl-base)
# Virtual packages only an omitted package provides (debconf's).
omitted_virtual=(debconf-2.0)

# --- 1. the dpkg status no longer names them -------------------------------------
# An alternative group ("a | b") goes when every alternative in it is omitted;
# one that something else still satisfies stays. Depends and Pre-Depends only:
# the fields dpkg and apt hold an installed package to.
status="$root/var/lib/dpkg/status"
[[ -z "$(ls -A "$root/var/lib/dpkg/updates" 2>/dev/null)" ]] ||
  { say "dpkg's journal is not empty: run with dpkg idle"; exit 1; }
mkdir -p "$root/usr/share/buzz-sprig"
awk -v names="${omitted[*]} ${omitted_virtual[*]}" -v out="$root/usr/share/buzz-sprig/omitted" '
  BEGIN { n = split(names, a, " "); for (i = 1; i <= n; i++) gone[a[i]] = 1
          print "# Purged from this image after install (images/sprig/rootfs-trim.sh):" > out
          print "#   " names > out
          print "# and the dependencies taken out of what stays:" > out }
  /^Package: / { pkg = $2 }
  /^(Pre-)?Depends: / && !(pkg in gone) {
    field = $1; sub(/^[^ ]+ /, ""); ng = split($0, groups, /, */); kept = ""; dropped = ""
    for (g = 1; g <= ng; g++) {
      na = split(groups[g], alts, / *\| */); all_gone = 1
      for (k = 1; k <= na; k++) { name = alts[k]; sub(/[ (:].*/, "", name); if (!(name in gone)) all_gone = 0 }
      if (all_gone) dropped = dropped (dropped == "" ? "" : ", ") groups[g]
      else kept = kept (kept == "" ? "" : ", ") groups[g]
    }
    if (dropped != "") print pkg ": " field " " dropped > out
    if (kept != "") print field " " kept
    next
  }
  { print }
' "$status" >"$status.trim"
mv "$status.trim" "$status"
say "dependencies on the omitted packages taken out: $(grep -vc '^#' "$root/usr/share/buzz-sprig/omitted")"

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
for p in "${omitted[@]}" "${omitted_virtual[@]}"; do
  if grep -Eq "^(Pre-)?Depends:.*(^|[ ,|])$p([ (:,]|$)|^Provides:.*(^|[ ,])$p([ (,]|$)" "$status"; then
    say "the dpkg status still names $p"; exit 1
  fi
done
in_root git --version >/dev/null
