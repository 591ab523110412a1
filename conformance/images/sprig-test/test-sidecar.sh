#!/bin/bash
# A test sidecar, started by the sprig entrypoint as the collector is. It
# leaves markers in HOME (the workspace volume the test reads from the host):
#   sidecar-started    at start
#   sidecar-got-term   when the stop reaches it (buzz-acp as PID 1 forwards it)
#   sidecar-exited     just before it exits, a moment after the stop
#   orphan-done        written by an orphan it leaves behind: a process whose
#                      parent exits at once, so PID 1 must reap it when it ends
#   environ-probe      once the test creates `probe-environ`: the exit status
#                      and error of reading /proc/1/environ (PID 1 is sealed:
#                      EACCES), then of reading its own environ (the control)
out=${HOME:-/tmp}
echo "$$" >"$out/sidecar-started"
on_term() {
  echo term >"$out/sidecar-got-term"
  # A short final round, as the collector makes one.
  for _ in 1 2 3 4 5; do read -r -t 0.1 <>"$out/.sidecar-fifo" 2>/dev/null || true; done
  echo exited >"$out/sidecar-exited"
  exit 0
}
trap on_term TERM
rm -f "$out/.sidecar-fifo"; mkfifo "$out/.sidecar-fifo"
# The orphan: its parent subshell exits at once; it ends after a second.
( bash -c 'read -r -t 1 <>"$1/.sidecar-fifo"; echo done >"$1/orphan-done"' _ "$out" & )
probe() {
  local rc err
  err=$(cat /proc/1/environ 2>&1 >/dev/null) && rc=0 || rc=$?
  {
    echo "pid1 $rc ${err##*: }"
    cat /proc/self/environ >/dev/null 2>&1 && echo "self 0" || echo "self $?"
  } >"$out/.environ-probe"
  mv "$out/.environ-probe" "$out/environ-probe"
}
while :; do
  read -r -t 0.2 <>"$out/.sidecar-fifo" || true
  if [[ -e $out/probe-environ && ! -e $out/environ-probe ]]; then probe; fi
done
