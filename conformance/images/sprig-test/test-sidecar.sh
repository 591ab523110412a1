#!/bin/bash
# A test sidecar, started by the sprig entrypoint as the collector is. It
# leaves markers in HOME (the workspace volume the test reads from the host):
#   sidecar-started    at start
#   sidecar-got-term   when the stop reaches it (buzz-acp as PID 1 forwards it)
#   sidecar-exited     just before it exits, a moment after the stop
#   orphan-done        written by an orphan it leaves behind: a process whose
#                      parent exits at once, so PID 1 must reap it when it ends
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
while :; do read -r -t 0.2 <>"$out/.sidecar-fifo" || true; done
