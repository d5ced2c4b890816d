//! `tablevault`: the control plane a person or a scheduler runs. See `tablevault --help`.

fn main() -> std::process::ExitCode {
    tablevault_worker::process::tune_allocator();
    tablevault_worker::process::end_quietly_on_closed_output();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(tablevault_cli::main())
}
