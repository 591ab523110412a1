//! `buzz-acp`: see the library docs and `buzz_acp::exit` for the exit codes.

fn main() {
    buzz_acp::entry::main()
}
