//! Printing outcomes: one JSON object with `--json`, a short human summary otherwise.
//! Errors go to stderr, or into the JSON object with the exit code.

use serde::Serialize;
use tablevault_coordinator::Error;
use tablevault_coordinator::report::{BackupReport, RestoreReport};
use tablevault_coordinator::restore::RestorePlan;
use tablevault_coordinator::verify::{VerifyReport, VerifyStatus};
use tablevault_core::protocol::{JobStatus, RestoreMode};

use crate::commands::Outcome;
use crate::exit::ExitCode;

/// Prints a value as pretty JSON on stdout.
pub fn print_json<T: Serialize + ?Sized>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("reports serialize")
    );
}

/// Prints a command's outcome.
pub fn print_outcome(outcome: &Outcome, json: bool) {
    match (outcome, json) {
        (Outcome::Backup(r), true) => print_json(r),
        (Outcome::Backup(r), false) => print_backup(r),
        (Outcome::Restore(r) | Outcome::RestoreStatus(r) | Outcome::Cancelled(r), true) => {
            print_json(r)
        }
        (Outcome::Restore(r) | Outcome::RestoreStatus(r) | Outcome::Cancelled(r), false) => {
            print_restore(r)
        }
        (Outcome::Verify(r), true) => print_json(r),
        (Outcome::Verify(r), false) => print_verify(r),
        (Outcome::Retention(r), json) => crate::retention_output::print(r, json),
        (Outcome::RestorePlan(p), true) => print_json(p),
        (Outcome::RestorePlan(p), false) => print_restore_plan(p),
        (
            Outcome::List {
                container,
                backups,
                restores,
            },
            true,
        ) => print_json(&serde_json::json!({
            "container": container,
            "backups": backups,
            "restores": restores,
        })),
        (
            Outcome::List {
                container,
                backups,
                restores,
            },
            false,
        ) => {
            if backups.is_empty() {
                println!("no backups in container {container:?}");
            } else {
                print_backup_table(backups);
            }
            for (id, problem) in backups
                .iter()
                .filter_map(|b| Some((&b.backup_id, b.problem.as_ref()?)))
            {
                println!("{id} is damaged: {problem} (`tablevault forget {id}` removes it)");
            }
            if !restores.is_empty() {
                println!("restores:");
            }
            for r in restores {
                println!(
                    "{}  {:<11}  of {} into {} ({}): {}, {} entities",
                    r.restore_id,
                    r.status.as_str(),
                    r.backup_id,
                    r.target_account,
                    r.mode.as_str(),
                    r.tables.join(", "),
                    r.entities
                );
            }
        }
    }
}

/// The backups as a table: id, start, state, source, tables, entities, size, duration.
fn print_backup_table(backups: &[tablevault_coordinator::listing::ListEntry]) {
    let rows: Vec<[String; 8]> = backups
        .iter()
        .map(|e| {
            [
                e.backup_id.clone(),
                e.created_at.clone(),
                e.status.as_str().to_string(),
                e.source_account.clone(),
                e.tables.len().to_string(),
                e.entities.map_or("-".into(), |n| n.to_string()),
                e.stored_bytes
                    .map_or("-".into(), |b| indicatif::HumanBytes(b).to_string()),
                e.duration_seconds.map_or("-".into(), |s| {
                    indicatif::HumanDuration(std::time::Duration::from_secs_f64(s)).to_string()
                }),
            ]
        })
        .collect();
    let header = [
        "ID", "STARTED", "STATE", "SOURCE", "TABLES", "ENTITIES", "SIZE", "DURATION",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 8]| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            // Counts are right-aligned, text left-aligned.
            if (4..=6).contains(&i) {
                out.push_str(&format!("{cell:>w$}  "));
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header);
    for row in &rows {
        line(row.each_ref().map(String::as_str));
    }
}

/// The human form of `restore --dry-run`.
pub fn print_restore_plan(p: &RestorePlan) {
    println!(
        "dry run: restore of backup {} (taken {} from account {}) into account {} ({}), mode {}{}",
        p.backup_id,
        p.backup_created_at,
        p.source_account,
        p.target_account,
        p.target_endpoint,
        p.mode.as_str(),
        if p.verify {
            ", verified after writing"
        } else {
            ", not verified (--no-verify)"
        }
    );
    println!(
        "  {} entities in {} blocks, {} tasks; nothing was written",
        p.entities, p.blocks, p.tasks
    );
    let different = match p.mode {
        RestoreMode::Upsert | RestoreMode::Replace => "overwritten",
        RestoreMode::Merge => "merged",
        RestoreMode::InsertSkip => "left alone (differ)",
        RestoreMode::InsertFail => "would FAIL (differ)",
    };
    for t in &p.tables {
        println!(
            "  {} -> {}{}: {} entities: {} new, {} {different}, {} already identical; {} in the target not in the backup{}",
            t.source,
            t.target,
            if t.exists { "" } else { " (new table)" },
            t.entities,
            t.new,
            t.different,
            t.unchanged,
            t.extra,
            if p.mode == RestoreMode::Replace {
                format!(", {} would be DELETED", t.would_delete)
            } else {
                " (kept)".to_string()
            }
        );
    }
}

/// Prints a failure.
pub fn print_error(e: &Error, code: ExitCode, json: bool) {
    if json {
        print_json(&serde_json::json!({ "error": e.to_string(), "exit_code": code as i32 }));
    } else {
        tablevault_worker::process::print_failure(&e.to_string());
    }
}

/// The human summary of a backup.
pub fn print_backup(r: &BackupReport) {
    let verb = match r.status {
        JobStatus::Complete => "complete",
        JobStatus::Incomplete | JobStatus::Failed | JobStatus::Cancelled => "INCOMPLETE",
        JobStatus::Mismatch => "MISMATCH",
        JobStatus::Deleting => "BEING DELETED",
        JobStatus::Damaged => "DAMAGED",
        JobStatus::Interrupted => "interrupted",
        JobStatus::InProgress => "in progress",
    };
    // Only a format other than the default is news (a restore needs a tablevault that
    // reads it).
    let format = if r.format == tablevault_core::format::DEFAULT_FORMAT {
        String::new()
    } else {
        format!(" (format {})", r.format)
    };
    println!(
        "backup {}{format} {verb}: {} table(s), {} entities, {} stored ({} raw), {}/{} tasks",
        r.backup_id,
        r.tables.len(),
        r.entities,
        indicatif::HumanBytes(r.stored_bytes),
        indicatif::HumanBytes(r.raw_bytes),
        r.tasks_committed,
        r.tasks_total,
    );
    if r.duration_seconds > 0.0 {
        println!(
            "  {:.1} s, {:.0} entities/s, {:.2} MB/s",
            r.duration_seconds, r.entities_per_second, r.mb_per_second
        );
    }
    let width = r.tables.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in &r.tables {
        println!(
            "  {:width$}  {:>12} entities  {:>4} ranges  {:>10}",
            t.name,
            t.entities,
            t.ranges,
            indicatif::HumanBytes(t.stored_bytes).to_string(),
        );
    }
    for p in &r.poisoned {
        print_poisoned(p);
    }
    let dropped = dropped_tables(r);
    match r.status {
        JobStatus::Incomplete if !dropped.is_empty() => {
            println!("{}", dropped_advice(&r.backup_id, &dropped, &r.tables))
        }
        JobStatus::Incomplete => println!(
            "  the backup is not usable; fix the cause, then `tablevault status {} --retry-poisoned --wait`",
            r.backup_id
        ),
        JobStatus::Interrupted | JobStatus::InProgress => println!(
            "  resume with `tablevault status {} --wait` (add --workers N to run workers here)",
            r.backup_id
        ),
        _ => {}
    }
}

fn counted(n: u64, what: &str) -> String {
    if n > 0 {
        format!(", {n} {what}")
    } else {
        String::new()
    }
}

/// The human summary of a restore.
pub fn print_restore(r: &RestoreReport) {
    println!(
        "restore {} of backup {} into account {} ({}), mode {}: {}, {} entities written in {:.1} s ({:.0} entities/s){}",
        r.restore_id,
        r.backup_id,
        r.target_account,
        r.target_endpoint,
        r.mode.as_str(),
        r.status,
        r.written,
        r.duration_seconds,
        r.entities_per_second,
        counted(r.deleted, "deleted (not in the backup)"),
    );
    for t in &r.tables {
        println!(
            "  {} -> {}: {} of {} entities written{}{}{}",
            t.source,
            t.target,
            t.written,
            t.entities,
            counted(t.identical, "already identical"),
            counted(t.skipped, "existing left alone"),
            counted(t.failed, "FAILED"),
        );
    }
    for f in r.failures.iter().take(20) {
        let keys: Vec<String> = f.keys.iter().take(5).map(ToString::to_string).collect();
        println!(
            "  FAILED batch in {} ({} entities, e.g. {}): {} {}",
            f.table,
            f.keys.len(),
            keys.join(", "),
            f.code.as_deref().unwrap_or(""),
            f.message
        );
    }
    if r.failures.len() > 20 {
        println!(
            "  … {} more failed batches (see --json)",
            r.failures.len() - 20
        );
    }
    for p in &r.poisoned {
        print_poisoned(p);
    }
    if r.status == JobStatus::Cancelled {
        // Written counts come from finished tasks' records; a task stopped mid-way
        // records nothing, though its batches that landed stay in the target.
        println!(
            "  counts are of finished tasks: tasks stopped by the cancel wrote some batches too (`{}` compares the target with the backup)",
            verify_command(r)
        );
    }
    match &r.verification {
        Some(v) => {
            let different: u64 = v.tables.iter().map(|t| t.counts.different).sum();
            println!(
                "  verified in {:.1} s: {}",
                v.duration_seconds,
                if v.ok {
                    verified(r.mode, different)
                } else {
                    "MISMATCH".to_string()
                }
            );
            for t in &v.tables {
                let c = &t.counts;
                println!(
                    "    {}: {} of {} backed-up entities match, {} missing, {} different; {} in the target not in the backup",
                    t.target, c.matching, c.backup, c.missing, c.different, c.extra
                );
                for d in t.differences.iter().filter(|d| d.kind != "extra").take(20) {
                    println!(
                        "    {} {}{}",
                        d.kind.as_str().to_uppercase(),
                        d.key,
                        if d.properties.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", d.properties.join(", "))
                        }
                    );
                }
            }
        }
        None if r.status == JobStatus::Complete => println!("  not verified (--no-verify)"),
        None => {}
    }
    match r.status {
        JobStatus::Interrupted | JobStatus::InProgress => println!(
            "  resume with `tablevault resume {}`, or end it with `tablevault cancel {}`",
            r.restore_id, r.restore_id
        ),
        JobStatus::Incomplete => println!(
            "  fix the cause, then `tablevault resume {}` retries what was not written",
            r.restore_id
        ),
        _ => {}
    }
}

/// What a passed check after a restore shows, as the mode promises it: only `replace`
/// makes the target the backup; the other modes leave what the backup does not hold,
/// and `insert-skip` leaves existing entities as they were.
fn verified(mode: RestoreMode, different: u64) -> String {
    match mode {
        RestoreMode::Replace => "the target holds exactly what the backup holds".into(),
        RestoreMode::Upsert | RestoreMode::InsertFail => {
            "every backed-up entity is in the target as backed up".into()
        }
        RestoreMode::Merge => {
            "every backed-up entity is in the target with its backed-up properties".into()
        }
        RestoreMode::InsertSkip if different > 0 => format!(
            "every backed-up key is in the target; {different} existing entities left alone \
             differ from the backup"
        ),
        RestoreMode::InsertSkip => "every backed-up entity is in the target as backed up".into(),
    }
}

/// The human summary of a verification.
pub fn print_verify(r: &VerifyReport) {
    println!(
        "verify backup {}: {}",
        r.backup_id,
        if r.status == VerifyStatus::Ok {
            "OK"
        } else {
            "MISMATCH"
        }
    );
    for t in &r.tables {
        print!(
            "  {}: {} of {} entities read from {} blocks ({} bad)",
            t.table, t.entities_read, t.entities_expected, t.blocks, t.bad_blocks
        );
        match &t.live_table {
            Some(live) => println!(
                "; against {live}: {} missing, {} extra, {} different",
                t.missing_in_live, t.extra_in_live, t.different
            ),
            None => println!(),
        }
    }
    for p in r.problems.iter().take(20) {
        println!("  PROBLEM: {p}");
    }
    for d in r.differences.iter().take(20) {
        println!(
            "  {} {} in {}{}",
            d.kind.as_str().to_uppercase(),
            d.key,
            d.table,
            if d.properties.is_empty() {
                String::new()
            } else {
                format!(": {}", d.properties.join(", "))
            }
        );
    }
    let found: u64 = r
        .tables
        .iter()
        .map(|t| t.missing_in_live + t.extra_in_live + t.different)
        .sum();
    if let Some(line) = unlisted(found, r.differences.len(), 20) {
        println!("{line}");
    }
}

/// The line that says a verification's list of differences stops short of the `found`
/// it counted, when it does: `listed` in the report, `shown` of them in text.
fn unlisted(found: u64, listed: usize, shown: usize) -> Option<String> {
    let shown = listed.min(shown) as u64;
    (found > shown).then(|| {
        format!(
            "  … {} more differences not listed ({listed} listed with --json, up to {} per table)",
            found - shown,
            tablevault_coordinator::compare::MAX_LISTED
        )
    })
}

/// The tables of a backup whose tasks were poisoned because the table no longer
/// exists: dropped after the backup was planned.
fn dropped_tables(r: &BackupReport) -> Vec<&str> {
    let mut gone: Vec<&str> = r
        .poisoned
        .iter()
        .filter(|p| p.reason.contains("TableNotFound"))
        .map(|p| p.table.as_str())
        .collect();
    gone.sort_unstable();
    gone.dedup();
    gone
}

/// What to do about a backup left incomplete by tables dropped after it was planned:
/// "fix the cause" named no cause, and a retry alone poisons the tasks again. A backup
/// never reports success without every table it planned, so the ways on are to
/// re-create the tables (a retry then backs up what they hold) or to back up the others.
fn dropped_advice(
    id: &str,
    dropped: &[&str],
    tables: &[tablevault_coordinator::report::TableReport],
) -> String {
    let others: Vec<&str> = tables
        .iter()
        .map(|t| t.name.as_str())
        .filter(|t| !dropped.contains(t))
        .collect();
    let mut text = format!(
        "  the backup is not usable: table(s) {} no longer exist (dropped after the backup was planned); \
         re-create them (even empty), then `tablevault status {id} --retry-poisoned --wait`",
        dropped.join(", ")
    );
    if !others.is_empty() {
        text.push_str(&format!(
            ", or back up the others: `tablevault backup --tables {}`",
            others.join(",")
        ));
    }
    text
}

fn print_poisoned(p: &tablevault_coordinator::report::PoisonReport) {
    let keys = p
        .range
        .as_ref()
        .map(|r| format!(" (keys {r} missing)"))
        .unwrap_or_default();
    println!("  POISONED {}/{}{keys}: {}", p.table, p.task, p.reason);
}

/// The `verify` command that compares a restore's target tables with its backup, as
/// it can be run: the target account from the environment, the tables, and the
/// renames. The hint once said `tablevault verify <id> --against`, which is a usage
/// error without a connection string, and compared the wrong tables after a rename.
fn verify_command(r: &RestoreReport) -> String {
    let tables: Vec<&str> = r.tables.iter().map(|t| t.source.as_str()).collect();
    let renames: Vec<String> = r
        .tables
        .iter()
        .filter(|t| t.source != t.target)
        .map(|t| format!("{}={}", t.source, t.target))
        .collect();
    let mut command = format!(
        "tablevault verify {} --against \"$TABLEVAULT_TARGET\"",
        r.backup_id
    );
    if !tables.is_empty() {
        command.push_str(&format!(" --tables {}", tables.join(",")));
    }
    if !renames.is_empty() {
        command.push_str(&format!(" --rename {}", renames.join(",")));
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cancel report's hint is a command that runs: with a connection string for
    /// `--against`, the tables restored and their new names.
    #[test]
    fn the_verify_hint_names_the_target_tables_and_renames() {
        let table =
            |source: &str, target: &str| tablevault_coordinator::report::RestoreTableReport {
                source: source.into(),
                target: target.into(),
                entities: 0,
                written: 0,
                identical: 0,
                skipped: 0,
                failed: 0,
                tasks_done: 0,
                tasks: 0,
            };
        let mut r: RestoreReport = serde_json::from_value(serde_json::json!({
            "restore_id": "r", "backup_id": "20261122T114600Z-1a2b3c4d", "status": "cancelled",
            "mode": "upsert", "target_account": "a", "target_endpoint": "http://x",
            "created_at": "", "entities": 0, "deleted": 0, "verification": null, "written": 0,
            "tables": [], "failures": [], "poisoned": [], "duration_seconds": 0.0,
            "entities_per_second": 0.0, "peak_rss_bytes": null
        }))
        .unwrap();
        r.tables = vec![table("Orders", "OrdersRestored"), table("Users", "Users")];
        assert_eq!(
            verify_command(&r),
            "tablevault verify 20261122T114600Z-1a2b3c4d --against \"$TABLEVAULT_TARGET\" \
             --tables Orders,Users --rename Orders=OrdersRestored"
        );
    }

    /// Regression: a backup left incomplete by a table dropped after planning advised
    /// "fix the cause" and a retry, which poisons the task again; it names the table
    /// and the two ways on.
    #[test]
    fn a_table_dropped_after_planning_is_named_with_the_ways_on() {
        use tablevault_coordinator::report::{PoisonReport, TableReport};
        let table = |name: &str| TableReport {
            name: name.into(),
            entities: 3,
            ranges: 1,
            raw_bytes: 0,
            stored_bytes: 0,
        };
        let poisoned = |table: &str, reason: &str| PoisonReport {
            table: table.into(),
            task: "r0000".into(),
            reason: reason.into(),
            range: None,
        };
        let r = BackupReport {
            backup_id: "b".into(),
            status: JobStatus::Incomplete,
            container: "c".into(),
            format: 1,
            tables: vec![table("Orders"), table("Temp1"), table("Users")],
            entities: 9,
            raw_bytes: 0,
            stored_bytes: 0,
            tasks_committed: 2,
            tasks_total: 4,
            largest_task_entities: None,
            poisoned: vec![
                poisoned("Temp1", "Query Entities: HTTP 404 TableNotFound: gone"),
                poisoned("Users", "something else"),
                poisoned("Temp1", "HTTP 404 TableNotFound"),
            ],
            planning_seconds: None,
            duration_seconds: 0.0,
            entities_per_second: 0.0,
            mb_per_second: 0.0,
            peak_rss_bytes: None,
        };
        let dropped = dropped_tables(&r);
        assert_eq!(dropped, ["Temp1"]);
        let text = dropped_advice("b", &dropped, &r.tables);
        assert!(text.contains("table(s) Temp1 no longer exist"), "{text}");
        assert!(
            text.contains("`tablevault status b --retry-poisoned --wait`"),
            "{text}"
        );
        assert!(
            text.contains("`tablevault backup --tables Orders,Users`"),
            "{text}"
        );
    }

    /// 300 differences counted, 100 listed: the text says the list stops short.
    #[test]
    fn a_verification_says_its_list_of_differences_is_cut() {
        let line = unlisted(300, 100, 20).unwrap();
        assert!(line.contains("280 more differences not listed"), "{line}");
        assert!(line.contains("100 listed with --json"), "{line}");
        assert_eq!(unlisted(3, 3, 20), None);
    }

    /// Only `replace` may say the target is the backup; an `insert-skip` that left
    /// differing entities alone says so.
    #[test]
    fn a_passed_check_says_what_the_mode_promised() {
        assert!(verified(RestoreMode::Replace, 0).contains("exactly"));
        for mode in [
            RestoreMode::Upsert,
            RestoreMode::Merge,
            RestoreMode::InsertFail,
            RestoreMode::InsertSkip,
        ] {
            assert!(!verified(mode, 0).contains("exactly"), "{mode:?}");
        }
        let skipped = verified(RestoreMode::InsertSkip, 3);
        assert!(
            skipped.contains("3 existing entities left alone differ"),
            "{skipped}"
        );
    }
}
