#!/usr/bin/env bash
# Runs every shell block of the README and docs/*.md that is marked runnable,
# so the guides cannot rot (issue 23). A block is runnable when its fence says
#
#   ```bash runnable
#
# (GitHub highlights it as bash; the second word is ours), also indented in
# a list item (the indentation is removed). Each block runs on
# its own, in the order of its file, with `bash -euo pipefail`:
#   - in a fresh empty directory, with HOME, XDG_* and the launcher's state
#     there too, so a guide never touches the user's files and blocks do not
#     see each other's state;
#   - with the workspace's freshly built binaries first on PATH
#     (buzz-launcher, buzz-acp, buzz-backend-kubernetes, runtime-agent,
#     runtime-ingest) and $BUZZ_REPO naming the checkout, for blocks that
#     call scripts/;
#   - with the caller's toolchain (cargo and go on PATH, CARGO_HOME,
#     RUSTUP_HOME, GOPATH), XDG_CACHE_HOME and the cache roots the caller
#     set (BUZZ_TESTENV_CACHE, as .ci/run does; BUZZ_IMAGE_CACHE,
#     BUZZ_STATIC_CACHE) and the static profile (BUZZ_STATIC_PROFILE), so what
#     was built first is what the blocks find, because the scripts a guide
#     calls (local-cluster.sh) build with it and keep their caches there: a
#     fresh HOME must not mean a fresh crate download or image build;
#   - under a bound of BUZZ_DOCS_BLOCK_TIMEOUT seconds (default 180); what
#     the blocks need built (the binaries, and for a block that runs
#     `local-cluster.sh up` the cluster binaries and the image) is built
#     first, outside the bound;
#   - a block that brings up the local cluster first waits until no other
#     real node runs on the machine, and if it leaves its cluster up (a
#     timeout), `local-cluster.sh down` runs after it.
# A failing block is reported with its file and line and its output, and
# the script exits 1 after running the rest.
#
# First, before any build (under a second), it checks that what the guides
# name still exists, and stops with FILE:LINE for each name that does not:
#   - every test a rule → test table cites. Such a table has a column headed
#     `test`; every code span in that column is a citation, written
#     `<module>::<test>`: the module is the test's file or directory (or an
#     inline `mod`, or the file a `#[path]` attribute names; `tests` is
#     skipped), and the fn must be declared in a *.rs file of that module. A
#     cell may group names (`rollup::tests::{a, b}`), continue the module of
#     the citation before it (`…::c`), cite a prefix (`exits::exit_3_…`,
#     `secrets::echoed_secrets_*`), a whole module (`provider::undeploy`,
#     `enrolled::tests::*`) or a file by its path (with a `/`). A bare
#     name is refused: it would not say where the test lives;
#   - every `<module>::<item>` code span in prose (a test cited outside a
#     table is written so): the item (fn, type, const, module, re-export) is
#     declared in a file of that module;
#   - every repository path in a code span (`scripts/…`, `docs/…`, a crate's
#     directory; a glob must match) and every BUZZ_*, RUNTIME_AGENT_* and
#     RUNTIME_INGEST_* variable, which some source file must use;
#   - every relative link: its file exists, and its #fragment is a heading
#     of that Markdown file (GitHub's anchors).
# Code blocks are not read.
#
#   scripts/docs-check.sh                  check the names, build (debug), run every block
#   scripts/docs-check.sh --names [FILE…]  only the name check (no build)
#   scripts/docs-check.sh --list           print the blocks it would run
#   scripts/docs-check.sh [--list] FILE…   only the blocks of these files
#
#   CARGO_TARGET_DIR    where the binaries are (default ./target)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
say() { printf 'docs-check: %s\n' "$*" >&2; }

list=0 names_only=0
case ${1:-} in
  --list) list=1; shift ;;
  --names) names_only=1; shift ;;
esac
timeout_s="${BUZZ_DOCS_BLOCK_TIMEOUT:-180}"
work="$(mktemp -d "${TMPDIR:-/tmp}/buzz-docs-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if (( $# )); then
  files=("$@")
  for f in "${files[@]}"; do [[ -f $f ]] || { say "no such file: $f"; exit 2; }; done
else
  files=(README.md)
  shopt -s nullglob
  files+=(docs/*.md)
  shopt -u nullglob
fi

# The name check (see the header). The index: every item declaration and
# #[path] attribute of the workspace's *.rs files, as grep prints them.
check_names() {
  local idx="$work/items" top
  find . \( -name target -o -name .git -o -name node_modules \) -prune -o -name '*.rs' -print \
    | sed 's|^\./||' > "$work/rs-files"
  xargs -d '\n' grep -HnoE '^[[:space:]]*(pub(\([^)]*\))?[[:space:]]+)?((async|unsafe|const|extern "C")[[:space:]]+)*(fn|struct|enum|const|static|trait|type|mod|union|macro_rules!)[[:space:]]*[A-Za-z_][A-Za-z0-9_]*|^[[:space:]]*#\[path = "[^"]+"\]' \
    < "$work/rs-files" > "$idx" || true
  top="^($(find . -mindepth 1 -maxdepth 1 -type d ! -name '.*' ! -name target -printf '%f\n' | paste -sd '|'))/"
  # Every BUZZ_* / RUNTIME_AGENT_* / RUNTIME_INGEST_* name the sources use.
  grep -rhoE --exclude-dir=target --exclude-dir=.git --exclude-dir=node_modules --exclude='*.md' \
    '\b(BUZZ|RUNTIME_AGENT|RUNTIME_INGEST)_[A-Z0-9_]+' . | sort -u > "$work/env-names" || true
  # Every heading's anchor (GitHub's: lower case, punctuation dropped, spaces
  # to -, a repeat gets -1, -2, …) of the README and docs/*.md, as FILE SLUG.
  awk '
    FNR == 1 { infence = 0; delete seen }
    /^[ \t]*(```|~~~)/ { infence = !infence; next }
    !infence && /^#+ / {
      h = $0; sub(/^#+ +/, "", h); sub(/ +#*$/, "", h); h = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
      slug = h; if (h in seen) slug = h "-" seen[h]; seen[h]++
      print FILENAME, slug
    }' README.md docs/*.md > "$work/anchors"
  awk -v idx="$idx" -v envidx="$work/env-names" -v anchidx="$work/anchors" -v root="$root" \
    -v toplevel="$top" "$names_awk" "$idx" "$work/env-names" "$work/anchors" "$@"
}
names_awk=$(cat <<'AWK'
# Inputs, in order: the item index (grep's FILE:LINE:<match>, the match
# ending in "KIND NAME", or a #[path] attribute), the variable names, the
# anchors (FILE SLUG), then the Markdown files to check.
function comps(f,   n, i, p, c) {
  n = split(f, p, "/")
  for (i = 1; i <= n; i++) {
    c = p[i]; sub(/\.rs$/, "", c); gsub(/-/, "_", c)
    if (c != "" && c != ".") { mods[c] = 1; incomp[f SUBSEP c] = 1 }
  }
}
FILENAME == envidx { envs[$0] = 1; next }
FILENAME == anchidx { anchors[$1 SUBSEP $2] = 1; next }
FILENAME == idx {
  line = $0
  f = line; sub(/:.*/, "", f); sub(/^\.\//, "", f)
  m = line; sub(/^[^:]*:[0-9]+:/, "", m)
  if (m ~ /^[ \t]*#\[path/) {                       # #[path = "x_tests.rs"] mod tests;
    t = m; sub(/^[^"]*"/, "", t); sub(/".*/, "", t)
    d = f; if (!sub(/\/[^\/]*$/, "", d)) d = "."
    st = f; sub(/.*\//, "", st); sub(/\.rs$/, "", st)
    pathof[++npath] = d "/" t; pathmod[npath] = st
    next
  }
  n = split(m, w, /[ \t!]+/); name = w[n]; kind = w[n - 1]
  if (!(f in seen)) { seen[f] = 1; files[++nfiles] = f; comps(f) }
  if (kind == "fn") { fnin[f SUBSEP name] = 1; fns[name] = 1 }
  else if (kind == "mod") { mods[name] = 1; modin[f SUBSEP name] = 1 }
  items[name] = 1; itemin[f SUBSEP name] = 1
  next
}

FNR == 1 && !pathsdone {
  pathsdone = 1
  for (i = 1; i <= npath; i++) { t = pathof[i]; sub(/^\.\//, "", t); incomp[t SUBSEP pathmod[i]] = 1 }
}
# --- Markdown -------------------------------------------------------------
# Prose is checked a paragraph at a time (a code span may wrap a line); table
# rows one at a time.
FNR == 1 {
  flush(); infence = 0; intable = 0; curfile = FILENAME
  sub(/^\.\//, "", curfile); if (index(curfile, root "/") == 1) curfile = substr(curfile, length(root) + 2)
}
/^[ \t]*(```|~~~)/ { flush(); infence = !infence; intable = 0; next }
infence { next }
/^[ \t]*$/ { flush(); intable = 0; next }
$0 !~ /^[ \t]*\|/ { intable = 0; if (np == 0) para = $0; else para = para " " $0; pstart[++np] = length(para) - length($0) + 1; pline[np] = FNR; next }
{
  flush()
  ncell = splitrow($0, cell)
  if (!intable) {                              # the header row
    intable = 1; testcol = 0
    for (i = 1; i <= ncell; i++) { h = cell[i]; gsub(/^[ \t]+|[ \t]+$/, "", h); if (h == "test") testcol = i }
    next
  }
  if ($0 ~ /^[ \t|:-]+$/) next                 # the separator row
  for (i = 1; i <= ncell; i++) if (i == testcol) testcell(cell[i], FNR); else prose(cell[i], 0)
}
END { flush(); exit bad ? 1 : 0 }
function flush() { if (np) prose(para, 1); np = 0; para = "" }
# Splits a table row on unescaped |; cell[1] is the first cell.
function splitrow(s, cell,   n, i, c, cur, prev) {
  sub(/^[ \t]*\|/, "", s); sub(/\|[ \t]*$/, "", s)
  n = 1; cur = ""; prev = ""
  for (i = 1; i <= length(s); i++) {
    c = substr(s, i, 1)
    if (c == "|" && prev != "\\") { cell[n++] = cur; cur = "" } else cur = cur c
    prev = c
  }
  cell[n] = cur
  return n
}
# The code spans of s into span[1..n] (a run of k backticks closes at the next
# run of exactly k).
# spanat[i] is where span i starts in s.
function spans(s, span, spanat,   n, i, k, rest, closed, pos, restpos) {
  n = 0; pos = 1
  while (match(s, /`+/)) {
    k = RLENGTH; pos += RSTART - 1 + k; restpos = pos
    rest = substr(s, RSTART + k); s = rest; closed = 0
    while (match(s, /`+/)) {
      if (RLENGTH == k) {
        closed = 1; span[++n] = substr(rest, 1, length(rest) - length(s) + RSTART - 1); spanat[n] = restpos
        pos += RSTART - 1 + k; s = substr(s, RSTART + k); break
      }
      pos += RSTART - 1 + RLENGTH; s = substr(s, RSTART + RLENGTH)
    }
    if (!closed) break
  }
  for (i = 1; i <= n; i++) gsub(/^ +| +$/, "", span[i])
  return n
}
function exists(p) { if (p !~ /^\//) p = root "/" p; return system("for p in " p "; do [ -e \"$p\" ] && exit 0; done; exit 1") == 0 }
function fail(msg) { printf "%s:%d: %s\n", curfile, where, msg; bad++ }
# A repository path in prose (scripts/…, docs/…, a crate's dir): it exists.
function checkpath(p,   q) {
  q = p; sub(/\/$/, "", q)
  if (q ~ /[<>…{}$ ]/) return
  if (!exists(q)) fail("`" p "` names no file or directory of the repository")
}
# Links [text](target) of s outside code spans: the file exists, and a
# #fragment is a heading of that Markdown file.
function links(s, inpara,   t, pos, k, target, file, frag, d, skip) {
  t = s; pos = 0
  while (match(t, /\]\([^) ]+\)/)) {
    target = substr(t, RSTART + 2, RLENGTH - 3); pos += RSTART
    t = substr(t, RSTART + RLENGTH); pos += RLENGTH - 1
    if (target ~ /^[a-z]+:/) continue
    where = FNR
    if (inpara) for (k = np; k >= 1; k--) if (pstart[k] <= pos) { where = pline[k]; break }
    file = target; frag = ""
    if (index(target, "#")) { file = substr(target, 1, index(target, "#") - 1); frag = substr(target, index(target, "#") + 1) }
    d = curfile; if (!sub(/\/[^\/]*$/, "", d)) d = "."
    if (file == "") file = curfile; else file = (d == "." ? "" : d "/") file
    while (sub(/[^\/]+\/\.\.\//, "", file)) {}
    if (!exists(file)) { fail("link to " target ": no file " file); continue }
    if (frag != "" && file ~ /\.md$/ && !((file SUBSEP frag) in anchors)) fail("link to " target ": " file " has no heading #" frag)
  }
}
# s is a paragraph (inpara: its lines are pstart/pline) or a table cell.
function prose(s, inpara,   n, i, k, sp, at, e) {
  links(s, inpara)
  n = spans(s, sp, at)
  for (i = 1; i <= n; i++) {
    where = FNR
    if (inpara) for (k = np; k >= 1; k--) if (pstart[k] <= at[i]) { where = pline[k]; break }
    if (sp[i] ~ /^[a-z][a-z0-9_-]*\/[^ ]*$/ && sp[i] ~ toplevel) checkpath(sp[i])
    else if (sp[i] ~ /^(BUZZ|RUNTIME_AGENT|RUNTIME_INGEST)_[A-Z0-9_]+(=.*)?$/) {
      e = sp[i]; sub(/=.*/, "", e)
      if (!(e in envs)) fail("`" sp[i] "`: no source file uses the variable " e)
    }
    else if (sp[i] ~ /^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+(\(\))?$/) checkitem(sp[i])
  }
}
# A code path in prose: its last segment is an item (fn, type, const, module)
# of a file its nearest lower-case module names.
function checkitem(p,   n, seg, name, q, i) {
  sub(/\(\)$/, "", p)
  n = split(p, seg, "::"); name = seg[n]; q = ""
  for (i = n - 1; i >= 1; i--) if (seg[i] ~ /^[a-z]/ && seg[i] != "tests") { q = seg[i]; break }
  if (name in mods && (q == "" || modunder(name, q))) return
  if (!(name in items)) { fail("`" p "`: no item " name " in any .rs file"); return }
  if (q != "" && !qualified(name, q, 0) && !reexported(name, q)) fail("`" p "`: " name " exists, but not in a module " q)
}
# Whether item/fn `name` is declared in a file that module q names.
function qualified(name, q, fnonly,   i, f) {
  if (!(q in mods)) return 0
  for (i = 1; i <= nfiles; i++) {
    f = files[i]
    if (!((f SUBSEP q) in incomp) && !((f SUBSEP q) in modin)) continue
    if (fnonly ? ((f SUBSEP name) in fnin) : ((f SUBSEP name) in itemin)) return 1
  }
  return 0
}
# Whether module `name` lies under module q (a file with both components).
function modunder(name, q,   i, f) {
  for (i = 1; i <= nfiles; i++) {
    f = files[i]
    if (((f SUBSEP name) in incomp || (f SUBSEP name) in modin) && ((f SUBSEP q) in incomp)) return 1
  }
  return 0
}
# `app::chat` for a `pub use crate::relay_ops::{…, chat, …}` in app.rs.
function reexported(name, q,   i, f) {
  for (i = 1; i <= nfiles; i++) {
    f = files[i]
    if (!((f SUBSEP q) in incomp)) continue
    if (system("grep -qw -- '" name "' '" root "/" f "'") == 0) return 1
  }
  return 0
}
function testcell(s, line,   n, i, sp, at, prefix, c) {
  n = spans(s, sp, at); prefix = ""; where = line
  for (i = 1; i <= n; i++) {
    c = sp[i]
    if (c ~ /\//) { if (!exists(c)) fail("`" c "`: no such test file"); continue }
    if (c !~ /^(…|[a-z_][a-z0-9_]*)((::)?(\{[a-z0-9_, ]+\}|[a-z_][a-z0-9_]*(…)?|[a-z_][a-z0-9_]*_\*|\*))*$/ || c ~ /^…[^:]/) {
      fail("`" c "` in a test column is not a test citation (module::test_name, with {a, b}, a trailing … or *)"); continue
    }
    if (substr(c, 1, 3) == "…") {
      if (prefix == "") { fail("`" c "`: … with no earlier citation in the cell"); continue }
      c = prefix substr(c, 4)
    }
    if (c !~ /::/) { fail("`" c "` in a test column: cite it with its module, as module::" c); continue }
    expand(c)
    if (match(c, /.*::/)) prefix = substr(c, 1, RLENGTH - 2); else prefix = ""
  }
}
# a::{x, y}::z → a::x::z, a::y::z
function expand(c,   pre, post, body, k, alt, j) {
  if (!match(c, /\{[^}]*\}/)) { checktest(c); return }
  pre = substr(c, 1, RSTART - 1); post = substr(c, RSTART + RLENGTH); body = substr(c, RSTART + 1, RLENGTH - 2)
  k = split(body, alt, /[ ,]+/)
  for (j = 1; j <= k; j++) if (alt[j] != "") expand(pre alt[j] post)
}
function checktest(c,   n, seg, name, q, i, re, f, wanttests, found) {
  n = split(c, seg, "::"); name = seg[n]; q = ""; wanttests = 0
  for (i = n - 1; i >= 1; i--) { if (seg[i] == "tests") { wanttests = 1; continue } q = seg[i]; break }
  if (name == "*") {
    if (q == "" || !(q in mods)) { fail("`" c "`: no module " q); return }
    if (wanttests && !hastests(q)) fail("`" c "`: module " q " has no tests module")
    return
  }
  if (name ~ /(…|_\*)$/) {
    re = name; sub(/(…|\*)$/, "", re); found = 0
    for (f in fns) if (index(f, re) == 1 && (q == "" || qualified(f, q, 1))) { found = 1; break }
    if (!found) fail("`" c "`: no test fn starting " re (q == "" ? "" : " in a module " q))
    return
  }
  if (name in fns && (q == "" || qualified(name, q, 1))) return
  if (name in mods && (q == "" || modunder(name, q))) return   # a test file: `provider::undeploy`
  if (name in fns || name in mods) fail("`" c "`: " name " exists, but not in a module " q)
  else fail("`" c "`: no fn " name " in any .rs file")
}
function hastests(q,   i, f) {
  for (i = 1; i <= nfiles; i++) {
    f = files[i]
    if (((f SUBSEP q) in incomp) && ((f SUBSEP "tests") in modin || f ~ /\/tests(\.rs|\/)/)) return 1
    if (((f SUBSEP q) in modin)) return 1
  }
  return 0
}
AWK
)

if (( ! list )); then
  if ! out="$(check_names "${files[@]}")"; then
    printf '%s\n' "$out" >&2
    say "$(printf '%s\n' "$out" | grep -c .) name(s) or link(s) above do not resolve; fix the guide"
    exit 1
  fi
  say "ok   the names and links of ${#files[@]} file(s) resolve"
  (( names_only )) && exit 0
fi

# Extracts the runnable blocks as files $work/blocks/NNN with a header line
# "# FILE:LINE".
mkdir -p "$work/blocks"
awk -v out="$work/blocks" '
  FNR == 1 { inblock = 0 }
  /^[ \t]*```/ {
    fence = $0; sub(/^[ \t]*/, "", fence)
    if (inblock) { inblock = 0; close(path); next }
    if (fence ~ /^```(bash|sh) +runnable[[:space:]]*$/) {
      n++; path = sprintf("%s/%03d", out, n); inblock = 1
      indent = length($0) - length(fence)   # a fence inside a list item
      printf "# %s:%d\n", FILENAME, FNR > path
      next
    }
  }
  inblock {
    line = $0
    if (substr(line, 1, indent) ~ /^[ \t]*$/) line = substr(line, indent + 1)
    print line > path
  }
' "${files[@]}"

blocks=("$work"/blocks/*)
if [[ ! -e ${blocks[0]} ]]; then
  say "no runnable blocks in ${files[*]}"
  # Named files may have none (their names were checked above); the whole
  # set having none means the extraction broke.
  (( $# )) && exit 0
  exit 1
fi
if (( list )); then
  for b in "${blocks[@]}"; do head -n 1 "$b"; sed -n '2,$p' "$b" | sed 's/^/    /'; done
  exit 0
fi

target="${CARGO_TARGET_DIR:-$root/target}"
say "building the binaries the guides use"
# Every binary of the workspace, as scripts/test.sh's build phase builds
# them (the same features, so a no-op after it; a subset of packages would
# unify features differently and rebuild some crates).
cargo build --quiet --locked --workspace --bins >&2
bin="$target/debug"
# A block that brings up scripts/local-cluster.sh gets what `up` would build
# built here, outside the block's time bound (each is cached: a no-op when
# nothing changed): the cluster binaries, the image, the cluster's helper.
if grep -lq 'local-cluster\.sh up' "${blocks[@]}"; then
  say "building what scripts/local-cluster.sh up needs"
  scripts/testenv-build.sh >/dev/null
  # (scripts/static-build.sh drops cargo's CARGO_MANIFEST_DIR and the like
  # when this runs under cargo, so the image's binaries are not rebuilt.)
  # The image in the profile local-cluster.sh builds it with: the caller's
  # BUZZ_STATIC_PROFILE, passed on to the blocks, else its default.
  BUZZ_STATIC_PROFILE="${BUZZ_STATIC_PROFILE:-suite}" scripts/image-build.sh >/dev/null
  cargo build --quiet --locked -p buzz-conformance --bin local-cluster >&2
  scripts/local-cluster.sh keep "$target/debug/local-cluster"
fi

# The toolchain's directories, in the caller's PATH order, and its homes.
toolpath=""
for tool in cargo go; do
  if p="$(command -v "$tool" 2>/dev/null)"; then toolpath+=":$(dirname "$p")"; fi
done
tool_env=(CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}")
if command -v go >/dev/null 2>&1; then tool_env+=(GOPATH="$(go env GOPATH)"); fi

# One real node runs per machine (scripts/local-cluster.sh and the real-node
# suites share /run/buzz-real-node/lock): a block that brings one up first
# waits, outside its bound, until none runs (BUZZ_DOCS_NODE_WAIT seconds).
node_lock=/run/buzz-real-node/lock
wait_for_the_node() {
  local waited=0 limit="${BUZZ_DOCS_NODE_WAIT:-600}"
  [[ -e $node_lock ]] || return 0
  until flock -n "$node_lock" true; do
    (( waited == 0 )) && say "waiting for the real node another run holds ($node_lock)"
    (( waited >= limit )) && { say "the real node is still held after $limit s"; return 0; }
    sleep 5; waited=$((waited + 5))
  done
}

failed=0
for b in "${blocks[@]}"; do
  where="$(head -n 1 "$b" | cut -c3-)"
  cluster=0
  if grep -q 'local-cluster\.sh up' "$b"; then cluster=1; wait_for_the_node; fi
  dir="$work/run-$(basename "$b")"
  mkdir -p "$dir/home"
  start=$(date +%s)
  if (cd "$dir" && env -i \
        PATH="$bin$toolpath:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" "${tool_env[@]}" \
        HOME="$dir/home" XDG_CONFIG_HOME="$dir/home/.config" XDG_DATA_HOME="$dir/home/.local/share" \
        XDG_STATE_HOME="$dir/home/.local/state" XDG_CACHE_HOME="${XDG_CACHE_HOME:-$HOME/.cache}" \
        BUZZ_REPO="$root" CARGO_TARGET_DIR="$target" TERM=dumb LANG=C.UTF-8 \
        ${BUZZ_TESTENV_BIN_DIR:+BUZZ_TESTENV_BIN_DIR="$BUZZ_TESTENV_BIN_DIR"} \
        ${BUZZ_TESTENV_CACHE:+BUZZ_TESTENV_CACHE="$BUZZ_TESTENV_CACHE"} \
        ${BUZZ_IMAGE_CACHE:+BUZZ_IMAGE_CACHE="$BUZZ_IMAGE_CACHE"} \
        ${BUZZ_STATIC_PROFILE:+BUZZ_STATIC_PROFILE="$BUZZ_STATIC_PROFILE"} \
        ${BUZZ_STATIC_CACHE:+BUZZ_STATIC_CACHE="$BUZZ_STATIC_CACHE"} \
        timeout --kill-after=10 "$timeout_s" bash -euo pipefail "$b") >"$dir/out" 2>&1; then
    say "ok   $where ($(( $(date +%s) - start )) s)"
  else
    rc=$?
    failed=1
    say "FAIL $where (exit $rc after $(( $(date +%s) - start )) s); the block:"
    sed -n '2,$p' "$b" | sed 's/^/    /' >&2
    say "its output (last 40 lines):"
    tail -n 40 "$dir/out" | sed 's/^/    /' >&2
  fi
  if (( cluster )) && [[ $(scripts/local-cluster.sh status 2>/dev/null) == running* ]]; then
    say "the block left its cluster up; taking it down"
    scripts/local-cluster.sh down >&2 || true
  fi
done
exit "$failed"
