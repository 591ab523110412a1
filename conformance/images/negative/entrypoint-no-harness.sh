#!/bin/bash
# Negative fixture: a custom image that replaced the harness with its own
# agent ("your tools instead" of "buzz-sprig plus your tools", spec §Image).
set -e
exec goose acp
