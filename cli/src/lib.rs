//! The `tablevault` command line over the control plane: arguments ([`args`]), running
//! each command ([`commands`]), printing its outcome ([`output`]) and turning it into an
//! exit code ([`exit`]). Workers run in this process with `--workers N`
//! ([`local_workers`]); the progress bar is [`progress`].

pub mod args;
pub mod commands;
pub mod exit;
pub mod local_workers;
pub mod output;
pub mod progress;
pub mod retention_output;

use clap::Parser;

pub use args::Cli;
pub use commands::Outcome;

/// Parses the command line, runs the command, prints its outcome and returns the process
/// exit code.
pub async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tablevault_worker::process::init_logging(cli.log_format, cli.log_level());
    let json = cli.command.json();
    if let Err(e) = cli.auth.install() {
        let e = tablevault_coordinator::Error::Config(e);
        let code = exit::error_code(&e);
        output::print_error(&e, code, json);
        return std::process::ExitCode::from(code as u8);
    }
    let shutdown = tablevault_worker::process::shutdown_on_signal();
    let code = match commands::run(cli.command, &shutdown).await {
        Ok(outcome) => {
            output::print_outcome(&outcome, json);
            exit::outcome_code(&outcome)
        }
        Err(e) => {
            let code = exit::error_code(&e);
            output::print_error(&e, code, json);
            code
        }
    };
    std::process::ExitCode::from(code as u8)
}
