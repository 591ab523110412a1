#!/usr/bin/env bash
# cargo's RUSTC_WORKSPACE_WRAPPER in scripts/test.sh: each workspace crate is
# compiled by clippy's driver, with clippy's lints and every warning an
# error, in the same build that makes the test binaries (issue 47: a
# separate `cargo clippy` checked every crate and dependency a second time,
# the largest phase of a cold run after the test build). What it enforces is
# `cargo clippy --workspace --all-targets -- -D warnings`, whose driver and
# arguments these are (cargo clippy passes its arguments after `--` the same
# way, after cargo's own); dependencies are compiled by rustc as before.
#
#   RUSTC_WORKSPACE_WRAPPER=scripts/clippy-rustc.sh BUZZ_CLIPPY_DRIVER=PATH cargo ...
#
# cargo runs it as `clippy-rustc.sh RUSTC ARGS...`; the driver drops RUSTC
# (its wrapper mode). BUZZ_CLIPPY_DRIVER is the toolchain's clippy-driver.
set -euo pipefail
exec "${BUZZ_CLIPPY_DRIVER:?the path of the toolchain clippy-driver}" "$@" -D warnings
