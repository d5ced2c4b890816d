//! `tablevault`: the control plane a person or a scheduler runs. See `tablevault --help`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tablevault_coordinator::cli::main().await
}
