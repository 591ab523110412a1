#!/usr/bin/env bash
# target-sweep.sh DEPS_DIR STAMP MESSAGES...
#
# Removes from cargo's DEPS_DIR (target/debug/deps) the outputs of every
# compilation unit that the builds whose JSON MESSAGES are given no longer
# make, so a target directory kept between runs (.ci/run keeps one) stays
# the size of one build. Cargo never removes an output itself: each change
# of a dependency, a feature set or a lockfile gives a unit a new metadata
# hash (the `-0123456789abcdef` in `libfoo-0123456789abcdef.rlib`) and
# leaves the old files beside the new. Kept across a season of runs, one
# target directory here grew to 38 GB of stale test binaries and libraries
# and filled the disk, and a link then died of SIGBUS.
#
# A unit is live when a path in MESSAGES (`cargo … --message-format=json`:
# cargo reports every unit it builds or finds fresh, with its files) names
# its hash. A binary is reported by its copy in target/debug only, a hard
# link to its file in deps: a file with a second link names a live hash too
# (its dep-info file is kept with it). A file is removed only when its hash is not live and it is older
# than STAMP (a file touched before the builds began): what another cargo
# built meanwhile (a test that builds, a run beside this one) is kept. A
# file removed by mistake costs one rebuild of its unit, never a wrong build:
# cargo rebuilds a unit whose output is missing.
#
# Prints one line: how many files and bytes it removed.
set -euo pipefail

[[ $# -ge 3 ]] || { echo "usage: target-sweep.sh DEPS_DIR STAMP MESSAGES..." >&2; exit 2; }
deps=$1 stamp=$2
shift 2
[[ -d $deps ]] || { echo "target-sweep.sh: no directory '$deps'" >&2; exit 2; }
[[ -f $stamp ]] || { echo "target-sweep.sh: no stamp file '$stamp'" >&2; exit 2; }

# No unit in the messages means they are not what this expects (cargo
# changed its format, or a build printed none): remove nothing.
grep -qE '/deps/[^"/]*-[0-9a-f]{16}' "$@" ||
  { echo "target-sweep.sh: no unit found in $*; nothing removed" >&2; exit 1; }
declare -A live=()
while read -r h; do
  live[$h]=1
done < <(
  {
    grep -ohE '/deps/[^"/]*-[0-9a-f]{16}' "$@"
    find "$deps" -maxdepth 1 -type f -links +1 -printf '%f\n'
  } | sed -nE 's/.*-([0-9a-f]{16})(\.[A-Za-z0-9]+)?$/\1/p' | sort -u
)

files=0 bytes=0
while IFS= read -r -d '' f; do
  name=${f##*/}
  [[ $name =~ -([0-9a-f]{16})(\.[A-Za-z0-9]+)?$ ]] || continue
  [[ -z ${live[${BASH_REMATCH[1]}]:-} ]] || continue
  size=$(stat -c %s "$f")
  rm -f -- "$f"
  files=$(( files + 1 )) bytes=$(( bytes + size ))
done < <(find "$deps" -maxdepth 1 -type f ! -newer "$stamp" -print0)
echo "removed ${files} stale files ($(( bytes / 1048576 )) MiB) from $deps"
