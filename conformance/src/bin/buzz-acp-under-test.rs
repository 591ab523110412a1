//! The `buzz-acp` entry point, built inside the conformance crate so the
//! harness suite can locate it with `env!("CARGO_BIN_EXE_buzz-acp-under-test")`.
//! It is the identical code path: `buzz-acp`'s own `main` is the same one call.

fn main() {
    buzz_acp::entry::main()
}
