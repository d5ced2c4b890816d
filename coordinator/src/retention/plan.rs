//! What goes and what stays, and why: pure functions of the survey and the request.

use std::collections::BTreeMap;

use super::policy::{apply, format_time};
use super::survey::{Kind, Surveyed};
use super::{Decision, ForgetRequest, PruneRequest, Span};

fn decision(b: &Surveyed, reasons: Vec<String>) -> Decision {
    Decision {
        id: b.id.clone(),
        started: format_time(b.started),
        state: b.kind.as_str().to_string(),
        source_account: b.source_account.clone(),
        reasons,
    }
}

/// The account a backup's policy group is: its name and Table endpoint (two accounts
/// can share a name; the same prune removed one's only backup as the other's older).
fn account(b: &Surveyed) -> (Option<&str>, Option<&str>) {
    (b.source_account.as_deref(), b.source_endpoint.as_deref())
}

/// For each table of each account, the newest complete backup holding it, with the
/// table: each stays. Beyond the newest backup of each account, a backup of fewer
/// tables after a backup of more does not make the older one removable while it is the
/// newest of a table (`--keep-last 1` after a backup of `A` and `B`, then of `A`, left
/// `B` with no backup).
///
/// Newest by when it was planned (its coordinator's clock), and also by when its
/// manifest was written (the service's clock), where the two disagree: a coordinator ten
/// minutes slow planned the newer of two backups under the older time, and the only
/// backup of the table's current state went.
fn newest_complete(backups: &[Surveyed]) -> BTreeMap<&str, Vec<String>> {
    let by_plan = newest_complete_by(backups, |b| Some(b.started));
    let by_service = newest_complete_by(backups, |b| b.completed);
    let mut out: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((_, _, table), b) in by_plan.into_iter().chain(by_service) {
        let tables = out.entry(b.id.as_str()).or_default();
        if !tables.contains(&table) {
            tables.push(table);
        }
    }
    out
}

/// Key of a table of an account.
type TableOf<'a> = (Option<&'a str>, Option<&'a str>, String);

/// For each table of each account, the complete backup holding it that is newest by
/// `time` (then id); backups without a time are left out.
fn newest_complete_by<'a>(
    backups: &'a [Surveyed],
    time: impl Fn(&Surveyed) -> Option<i64>,
) -> BTreeMap<TableOf<'a>, &'a Surveyed> {
    let mut newest: BTreeMap<TableOf<'a>, &'a Surveyed> = BTreeMap::new();
    for b in backups.iter().filter(|b| b.kind == Kind::Complete) {
        let Some(at) = time(b) else { continue };
        for t in &b.tables {
            let (name, endpoint) = account(b);
            let slot = newest
                .entry((name, endpoint, t.to_lowercase()))
                .or_insert(b);
            if (at, &b.id) > (time(slot).unwrap_or(i64::MIN), &slot.id) {
                *slot = b;
            }
        }
    }
    newest
}

/// Why the newest complete backup of some table stays.
fn newest_reason(tables: &[String], of: &Surveyed) -> String {
    if tables.len() == of.tables.len() {
        "newest complete".into()
    } else {
        format!("newest complete of table {}", tables.join(", "))
    }
}

/// Whether an unfinished backup has shown no activity within `abandoned_after`.
fn is_abandoned(b: &Surveyed, abandoned_after: &Span, now: i64) -> bool {
    b.last_activity <= abandoned_after.before(now)
}

/// `(kept, removed)` by the policy and the protections, newest first.
pub(crate) fn prune(backups: &[Surveyed], req: &PruneRequest) -> (Vec<Decision>, Vec<Decision>) {
    let selected: Vec<&Surveyed> = backups
        .iter()
        .filter(|b| match &req.source_account {
            Some(a) => b.source_account.as_deref() == Some(a.as_str()),
            None => true,
        })
        .collect();
    let mut reasons: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    // The policy, per source account, over complete backups.
    let mut groups: BTreeMap<(Option<&str>, Option<&str>), Vec<&Surveyed>> = BTreeMap::new();
    for b in selected.iter().filter(|b| b.kind == Kind::Complete) {
        groups.entry(account(b)).or_default().push(b);
    }
    let newest = newest_complete(backups);
    for group in groups.values_mut() {
        // Newest first, by time then id as `newest_complete` ranks them: backups planned
        // in the same second must not each count as the newest.
        group.sort_by(|a, b| (b.started, &b.id).cmp(&(a.started, &a.id)));
        let times: Vec<i64> = group.iter().map(|b| b.started).collect();
        for (b, mut why) in group.iter().zip(apply(&req.policy, &times)) {
            if let Some(tables) = newest.get(b.id.as_str()) {
                why.insert(0, newest_reason(tables, b));
            }
            reasons.insert(&b.id, why);
        }
    }
    let (mut kept, mut removed) = (Vec::new(), Vec::new());
    for b in selected {
        let mut why = reasons.remove(b.id.as_str()).unwrap_or_default();
        let active = format!("last activity {}", format_time(b.last_activity));
        let go = match b.kind {
            Kind::Complete => why.is_empty(),
            Kind::Deleting => true,
            Kind::Damaged => {
                why.push(format!(
                    "damaged: {} (`tablevault forget {}` removes it)",
                    b.damage.as_deref().unwrap_or("unreadable"),
                    b.id
                ));
                false
            }
            Kind::InProgress | Kind::Incomplete | Kind::Leftover => {
                let abandoned = is_abandoned(b, &req.abandoned_after, req.now);
                if !abandoned {
                    why.push(format!("{} ({active})", b.kind.as_str().replace('-', " ")));
                }
                abandoned
            }
        };
        if !b.readers.is_empty() {
            why.extend(
                b.readers
                    .iter()
                    .map(|r| format!("{r} (cancel it to release)")),
            );
            kept.push(decision(b, why));
        } else if go {
            let why = match b.kind {
                Kind::Complete => "not kept by any rule".to_string(),
                Kind::Deleting => "deletion unfinished".to_string(),
                _ => format!(
                    "abandoned: no activity since {}",
                    format_time(b.last_activity)
                ),
            };
            removed.push(decision(b, vec![why]));
        } else {
            kept.push(decision(b, why));
        }
    }
    let newest_first = |a: &Decision, b: &Decision| b.started.cmp(&a.started).then(b.id.cmp(&a.id));
    kept.sort_by(newest_first);
    removed.sort_by(newest_first);
    (kept, removed)
}

/// The named backups as removals, or why some of them must stay.
pub(crate) fn forget(backups: &[Surveyed], req: &ForgetRequest) -> Result<Vec<Decision>, String> {
    let newest = newest_complete(backups);
    let mut refusals = Vec::new();
    let mut removed: Vec<Decision> = Vec::new();
    for id in &req.ids {
        if removed.iter().any(|d| &d.id == id) {
            continue;
        }
        let Some(b) = backups.iter().find(|b| &b.id == id) else {
            refusals.push(format!("{id}: no such backup (see `tablevault list`)"));
            continue;
        };
        if let Some(tables) = newest.get(id.as_str()) {
            refusals.push(format!(
                "{id}: it is the newest complete backup of table(s) {} of account {}; it always stays",
                tables.join(", "),
                b.source_account.as_deref().unwrap_or("?")
            ));
        } else if !b.readers.is_empty() {
            refusals.push(format!(
                "{id}: {} reads it (wait for it to finish, or cancel it)",
                b.readers.join(", ")
            ));
        } else if matches!(b.kind, Kind::InProgress | Kind::Incomplete | Kind::Leftover)
            && !is_abandoned(b, &req.abandoned_after, req.now)
        {
            refusals.push(format!(
                "{id}: it is {} with activity at {} (removable once idle for --abandoned-after {})",
                b.kind.as_str(),
                format_time(b.last_activity),
                req.abandoned_after
            ));
        } else {
            removed.push(decision(b, vec!["forgotten".into()]));
        }
    }
    if refusals.is_empty() {
        Ok(removed)
    } else {
        Err(format!("nothing was removed: {}", refusals.join("; ")))
    }
}
