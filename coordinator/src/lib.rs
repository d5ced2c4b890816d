//! The tablevault coordinator.
