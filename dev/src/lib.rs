//! Development tools for tablevault that are not part of the shipped crates: the Azurite
//! launcher (tests, demo, benchmarks), deterministic sample data, the code behind the
//! `tablevault-demo` and `tablevault-bench` binaries, a network delay line for benchmarks,
//! and a simulation of tablevault at
//! Azure's published limits in virtual time (`sim`).

pub mod bench;
pub mod delay;
pub mod emulator;
pub mod sample;
pub mod sim;
pub mod tls;
