//! The tablevault worker.
