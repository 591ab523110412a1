#!/bin/bash
# Negative fixture: the harness is started as a child of bash, so bash stays
# PID 1 and the pod's SIGTERM never reaches buzz-acp (spec §Entrypoint).
set -e
cd "$HOME"
buzz-acp
