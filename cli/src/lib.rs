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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e, std::env::args_os().any(|a| a == "--json")),
    };
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

/// A command line clap refused (or `--help`, `--version`): clap's text as usual, and with
/// `--json` also the error object on stdout, so a script reading stdout learns why.
fn usage_error(e: &clap::Error, json: bool) -> std::process::ExitCode {
    let code = e.exit_code();
    if json && e.use_stderr() {
        // clap's message, up to the usage line: its first line may end with a colon
        // and name the arguments on the lines after it.
        let rendered = e.render().to_string();
        let message = rendered
            .lines()
            .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ");
        let message = message.strip_prefix("error: ").unwrap_or(&message);
        output::print_json(&serde_json::json!({ "error": message, "exit_code": code }));
    }
    let _ = e.print();
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(exit::ExitCode::Usage as u8))
}
