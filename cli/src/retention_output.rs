//! Printing what `prune` and `forget` kept and removed: one JSON object with `--json`,
//! otherwise a table of each, newest first, with the reasons.

use tablevault_coordinator::retention::{Decision, RetentionReport};

/// Prints a retention report.
pub fn print(r: &RetentionReport, json: bool) {
    if json {
        crate::output::print_json(r);
        return;
    }
    let (keep, remove) = if r.dry_run {
        ("would keep", "would remove")
    } else {
        ("kept", "removed")
    };
    if r.kept.is_empty() && r.removed.is_empty() && r.failed.is_empty() {
        println!("no backups in container {:?}", r.container);
        return;
    }
    table(&format!("{keep} {} backup(s)", r.kept.len()), &r.kept);
    table(
        &format!("{remove} {} backup(s)", r.removed.len()),
        &r.removed,
    );
    if !r.failed.is_empty() {
        println!(
            "could not remove {} backup(s); run again to finish:",
            r.failed.len()
        );
        for f in &r.failed {
            println!("  {}  {}", f.id, f.error);
        }
    }
    if r.dry_run {
        println!(
            "dry run: nothing was changed in container {:?}",
            r.container
        );
    }
}

fn table(title: &str, rows: &[Decision]) {
    println!("{title}:");
    if rows.is_empty() {
        return;
    }
    let account = |d: &Decision| d.source_account.clone().unwrap_or_else(|| "-".into());
    let id_w = rows.iter().map(|d| d.id.len()).max().unwrap_or(0).max(2);
    let acc_w = rows
        .iter()
        .map(|d| account(d).len())
        .max()
        .unwrap_or(0)
        .max(7);
    println!(
        "  {:<id_w$}  {:<20}  {:<11}  {:<acc_w$}  REASONS",
        "ID", "STARTED (UTC)", "STATE", "ACCOUNT"
    );
    for d in rows {
        println!(
            "  {:<id_w$}  {:<20}  {:<11}  {:<acc_w$}  {}",
            d.id,
            d.started,
            d.state,
            account(d),
            d.reasons.join(", ")
        );
    }
}
