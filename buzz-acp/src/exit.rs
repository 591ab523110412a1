//! The pinned exit-code contract lives in [`buzz_contract::exit`] (one table
//! for the harness that exits with it and the launcher that explains it);
//! every row is pinned by a test in `conformance/tests/harness.rs`.

pub use buzz_contract::exit::Exit;
