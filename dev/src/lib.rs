//! Development tools for tablevault that are not part of the shipped crates: the Azurite
//! launcher (tests, demo, benchmarks), deterministic sample data, and the code behind the
//! `tablevault-demo` and `tablevault-bench` binaries.

pub mod bench;
pub mod emulator;
pub mod sample;
