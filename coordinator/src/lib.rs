//! tablevault's control plane: plans backups into key-range tasks, enqueues them, runs or
//! watches workers, and finalizes jobs from the state they leave in blob storage. The
//! `tablevault` binary is a thin front-end over this library.

pub mod backup;
pub mod bench;
pub mod cli;
pub mod demo;
pub mod exit;
pub mod finalize;
pub mod listing;
pub mod planner;
pub mod progress;
pub mod report;
pub mod restore;
pub mod sample;
pub mod selection;
pub mod state;
pub mod verify;
pub mod workers;
