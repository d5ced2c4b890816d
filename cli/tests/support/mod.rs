//! How the CLI tests run the `tablevault` binary: with none of the variables that would
//! make a test depend on the environment it runs in, and its output as one text.
#![allow(dead_code)] // each test file uses a different subset

use std::process::{Command, Output};

/// Every variable the binary reads an account, a credential or a log level from.
const AMBIENT: &[&str] = &[
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_AUTH_MODE",
    "AZURE_STORAGE_KEY",
    "TABLEVAULT_SOURCE",
    "TABLEVAULT_BACKUP",
    "TABLEVAULT_TARGET",
    "TABLEVAULT_AUTH_MODE",
    "TABLEVAULT_IDENTITY",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
    "RUST_LOG",
];

/// `tablevault args…` with only `env` set of the variables it reads.
pub fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablevault"));
    cmd.args(args);
    for k in AMBIENT {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Standard output then standard error.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
