//! Retention on in-memory fakes: planted backups with chosen times, then prune and
//! forget, and a deletion stopped at every step and finished by the next run.

use std::sync::Arc;

use serde_json::json;
use tablevault_core::store::{BackupPaths, Store};
use tablevault_core::testing::{CrashSwitch, CrashingBlobs, MemoryBlobs};

use super::policy::parse_time;
use super::*;

const DAY: i64 = 86_400;

fn now() -> i64 {
    parse_time("2026-11-22T12:00:00Z").unwrap()
}

fn id_at(t: i64, suffix: &str) -> String {
    let s = policy::format_time(t).replace(['-', ':'], "");
    format!("{s}-{suffix}")
}

fn job(id: &str, t: i64, account: &str) -> serde_json::Value {
    job_of(id, t, (account, "http://x"), &["T"])
}

/// The plan of a backup of `tables` of the account `(name, table endpoint)`.
fn job_of(
    id: &str,
    t: i64,
    (account, endpoint): (&str, &str),
    tables: &[&str],
) -> serde_json::Value {
    let tables: Vec<serde_json::Value> = tables
        .iter()
        .map(|name| {
            json!({ "name": name, "planning": "whole",
                    "tasks": [ { "task": "r0000", "range": { "start": null, "end": null } } ] })
        })
        .collect();
    json!({
        "protocol": 1, "format": 1, "backup_id": id, "created_at": policy::format_time(t),
        "source": { "account": account, "table_endpoint": endpoint },
        "options": { "compression": "zstd", "blocks_per_blob": 20, "block_bytes": 1000,
                     "batch_bytes": 1000, "max_attempts": 5, "queue": "q" },
        "tables": tables,
        "tool_version": "test"
    })
}

/// A complete backup of `account` planned at `t`: plan, commit record, data, manifest.
async fn complete(store: &Store, t: i64, account: &str, suffix: &str) -> String {
    complete_of(store, t, (account, "http://x"), &["T"], suffix).await
}

/// [`complete`], of `tables` of the account `(name, table endpoint)`.
async fn complete_of(
    store: &Store,
    t: i64,
    (account, endpoint): (&str, &str),
    tables: &[&str],
    suffix: &str,
) -> String {
    let id = id_at(t, suffix);
    let p = BackupPaths::new(&id);
    store
        .overwrite(&p.job(), &job_of(&id, t, (account, endpoint), tables))
        .await
        .unwrap();
    store
        .mark(&p.data_blob("T", "r0000", "a1", 0), "data")
        .await
        .unwrap();
    store.mark(&p.enqueued_marker(), "").await.unwrap();
    let commit = json!({ "job": id, "table": "T", "task": "r0000", "finished_at": policy::format_time(t + 60) });
    store
        .overwrite(&p.commit("T", "r0000"), &commit)
        .await
        .unwrap();
    let manifest = json!({
        "format": 1, "backup_id": id, "created_at": policy::format_time(t),
        "completed_at": policy::format_time(t + 60),
        "source": { "account": account, "table_endpoint": "http://x" }, "compression": "zstd",
        "tables": [], "entities": 0, "raw_bytes": 0, "stored_bytes": 0, "tool_version": "test"
    });
    store.overwrite(&p.manifest(), &manifest).await.unwrap();
    id
}

/// A backup without a manifest whose last heartbeat was at `beat`.
async fn unfinished(store: &Store, t: i64, beat: i64, suffix: &str) -> String {
    let id = id_at(t, suffix);
    let p = BackupPaths::new(&id);
    store
        .overwrite(&p.job(), &job(&id, t, "acct"))
        .await
        .unwrap();
    store
        .mark(&p.data_blob("T", "r0000", "a1", 0), "data")
        .await
        .unwrap();
    let hb = json!({ "worker": "w", "at": policy::format_time(beat) });
    store
        .overwrite(&format!("{}w1", p.heartbeats_root()), &hb)
        .await
        .unwrap();
    id
}

async fn restore_of(store: &Store, backup: &str, rid: &str, status: &str) {
    let p = BackupPaths::new(backup);
    store.mark(&p.restore_job(rid), "{}").await.unwrap();
    let state = json!({ "status": status, "at": "2026-11-22T00:00:00Z", "by": "x" });
    store
        .overwrite(&p.restore_state(rid), &state)
        .await
        .unwrap();
}

fn fakes() -> (Arc<MemoryBlobs>, Store) {
    let blobs = Arc::new(MemoryBlobs::new("c"));
    (blobs.clone(), Store::new(blobs))
}

fn prune_req(policy: KeepPolicy) -> PruneRequest {
    PruneRequest {
        policy,
        abandoned_after: "7d".parse().unwrap(),
        source_account: None,
        dry_run: false,
        now: now(),
    }
}

fn ids(d: &[Decision]) -> Vec<&str> {
    d.iter().map(|d| d.id.as_str()).collect()
}

fn under(blobs: &MemoryBlobs, id: &str) -> usize {
    blobs
        .names()
        .iter()
        .filter(|n| n.starts_with(&format!("{id}/")))
        .count()
}

#[tokio::test]
async fn prune_keeps_what_the_policy_and_the_protections_say() {
    let (blobs, store) = fakes();
    let mut daily = Vec::new();
    for d in 0..5 {
        daily.push(
            complete(
                &store,
                now() - (d + 1) * DAY,
                "acct",
                &format!("0000000{d}"),
            )
            .await,
        );
    }
    let other = complete(&store, now() - 30 * DAY, "other", "0000000a").await;
    let read = complete(&store, now() - 20 * DAY, "acct", "0000000b").await;
    restore_of(&store, &read, "20261121T000000Z-r0000001", "interrupted").await;
    let ended = complete(&store, now() - 21 * DAY, "acct", "0000000c").await;
    restore_of(&store, &ended, "20261121T000000Z-r0000002", "complete").await;
    let young = unfinished(&store, now() - 10 * DAY, now() - DAY, "0000000d").await;
    let old = unfinished(&store, now() - 10 * DAY, now() - 9 * DAY, "0000000e").await;

    let policy = KeepPolicy {
        daily: Count::Last(2),
        ..Default::default()
    };
    let mut req = prune_req(policy);
    req.dry_run = true;
    let before = blobs.names();
    let dry = prune(&store, &req).await.unwrap();
    assert_eq!(blobs.names(), before, "a dry run changes nothing");
    let removed = ids(&dry.removed);
    assert_eq!(
        removed,
        [
            daily[2].as_str(),
            daily[3].as_str(),
            daily[4].as_str(),
            old.as_str(),
            ended.as_str()
        ]
    );
    let kept = ids(&dry.kept);
    assert_eq!(
        kept,
        [
            daily[0].as_str(),
            daily[1].as_str(),
            young.as_str(),
            read.as_str(),
            other.as_str()
        ]
    );
    let reasons = |id: &str| {
        dry.kept
            .iter()
            .find(|d| d.id == id)
            .unwrap()
            .reasons
            .clone()
    };
    assert_eq!(reasons(&daily[0]), ["newest complete", "daily 2026-11-21"]);
    assert_eq!(reasons(&daily[1]), ["daily 2026-11-20"]);
    assert_eq!(reasons(&other), ["newest complete", "daily 2026-10-23"]);
    assert!(reasons(&read)[0].starts_with("restore 20261121T000000Z-r0000001 interrupted"));
    assert!(reasons(&young)[0].starts_with("in progress (last activity 2026-11-21"));
    let old_why = &dry.removed.iter().find(|d| d.id == old).unwrap().reasons;
    assert_eq!(
        old_why,
        &["abandoned: no activity since 2026-11-13T12:00:00Z"]
    );

    req.dry_run = false;
    let done = prune(&store, &req).await.unwrap();
    assert_eq!(ids(&done.removed), removed);
    assert!(done.failed.is_empty());
    for id in &removed {
        assert_eq!(under(&blobs, id), 0, "{id} is gone");
    }
    for id in &kept {
        assert!(under(&blobs, id) > 0, "{id} stays");
    }
    // Pruning the result again removes nothing.
    let again = prune(&store, &req).await.unwrap();
    assert!(again.removed.is_empty(), "{:?}", again.removed);

    // Only one account's backups when asked.
    req.source_account = Some("other".into());
    let only = prune(&store, &req).await.unwrap();
    assert_eq!(ids(&only.kept), [other.as_str()]);
}

/// A misspelt `--source-account` is refused with the accounts the container holds,
/// not read as an empty container (exit 0).
#[tokio::test]
async fn prune_of_an_unknown_source_account_is_refused() {
    let (_, store) = fakes();
    complete(&store, now() - DAY, "acct", "0000000a").await;
    let mut req = prune_req(KeepPolicy {
        last: Count::Last(1),
        ..Default::default()
    });
    req.source_account = Some("acc".into());
    let e = prune(&store, &req).await.unwrap_err();
    assert!(matches!(e, crate::Error::Invalid(_)), "{e}");
    assert!(e.to_string().contains("of: acct"), "{e}");
}

#[tokio::test]
async fn prune_without_a_rule_is_refused() {
    let (_, store) = fakes();
    let zero = KeepPolicy {
        last: Count::Last(0),
        ..Default::default()
    };
    let e = prune(&store, &prune_req(zero)).await.unwrap_err();
    assert!(matches!(e, crate::Error::Invalid(_)), "{e}");
}

#[tokio::test]
async fn forget_refuses_the_newest_and_what_restores_read() {
    let (blobs, store) = fakes();
    let a = complete(&store, now() - 3 * DAY, "acct", "0000000a").await;
    let b = complete(&store, now() - 2 * DAY, "acct", "0000000b").await;
    let c = complete(&store, now() - DAY, "acct", "0000000c").await;
    restore_of(&store, &b, "20261121T000000Z-r0000001", "in-progress").await;
    let young = unfinished(&store, now() - DAY, now() - 60, "0000000d").await;
    let req = |ids: &[&str]| ForgetRequest {
        ids: ids.iter().map(|s| s.to_string()).collect(),
        abandoned_after: "7d".parse().unwrap(),
        dry_run: false,
        now: now(),
    };
    let before = blobs.names();
    for (id, why) in [
        (&c, "newest complete"),
        (&b, "reads it"),
        (&young, "in-progress"),
    ] {
        let e = forget(&store, &req(&[a.as_str(), id.as_str()]))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
        assert_eq!(blobs.names(), before, "nothing removed when one is refused");
    }
    let e = forget(&store, &req(&["20261122T000000Z-ffffffff"]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no such backup"), "{e}");
    let done = forget(&store, &req(&[a.as_str()])).await.unwrap();
    assert_eq!(ids(&done.removed), [a.as_str()]);
    assert_eq!(under(&blobs, &a), 0);
}

/// Regression (audit 12): a restore that began reading a backup between `forget`'s
/// check and its removal kept the backup, as it must, but `forget` exited 0 ("removed
/// 0 backup(s)"), so `forget ID && …` was told it was gone. It is a refusal now, which
/// names what was removed all the same.
#[tokio::test]
async fn a_restore_begun_while_forget_removes_its_backup_is_a_refusal() {
    let (blobs, store) = fakes();
    let a = complete(&store, now() - 4 * DAY, "acct", "0000000a").await;
    let b = complete(&store, now() - 3 * DAY, "acct", "0000000b").await;
    complete(&store, now() - DAY, "acct", "0000000c").await;
    let req = ForgetRequest {
        ids: vec![a.clone(), b.clone()],
        abandoned_after: "7d".parse().unwrap(),
        dry_run: false,
        now: now(),
    };
    let backups = survey::survey(&store, req.now, &req.abandoned_after)
        .await
        .unwrap();
    // The restore registers after the survey, before the removal.
    restore_of(&store, &b, "20261122T115959Z-r0000001", "in-progress").await;
    let kept = under(&blobs, &b);
    let e = forget_surveyed(&store, &backups, &req).await.unwrap_err();
    assert!(matches!(e, crate::Error::Invalid(_)), "{e}");
    let text = e.to_string();
    assert!(text.contains(&format!("not removed: {b}")), "{text}");
    assert!(text.contains("began reading it"), "{text}");
    assert!(text.contains(&format!("removed {a}")), "{text}");
    assert_eq!(under(&blobs, &a), 0, "the other one went");
    assert_eq!(under(&blobs, &b), kept, "the one read stays whole");
}

/// Regression: two accounts of one name (two emulators; a Storage and a Cosmos DB
/// Table account) were one group, and `--keep-last 1` removed one account's only
/// backup as the other's older one.
#[tokio::test]
async fn accounts_that_share_a_name_are_kept_apart() {
    let (_, store) = fakes();
    let here = ("acct", "http://127.0.0.1:1/acct");
    let there = ("acct", "http://127.0.0.1:2/acct");
    let only = complete_of(&store, now() - 3 * DAY, there, &["T"], "0000000a").await;
    let old = complete_of(&store, now() - 2 * DAY, here, &["T"], "0000000b").await;
    let new = complete_of(&store, now() - DAY, here, &["T"], "0000000c").await;
    let last = KeepPolicy {
        last: Count::Last(1),
        ..Default::default()
    };
    let pruned = prune(&store, &prune_req(last)).await.unwrap();
    assert_eq!(ids(&pruned.removed), [old.as_str()]);
    let mut kept = ids(&pruned.kept);
    kept.sort();
    assert_eq!(kept, [only.as_str(), new.as_str()]);
}

/// Regression: after a backup of tables `A` and `B`, a backup of `A` alone made the
/// first removable by `--keep-last 1`, and `B` was left with no backup. The newest
/// complete backup of each table stays.
#[tokio::test]
async fn the_newest_backup_of_each_table_stays() {
    let (_, store) = fakes();
    let acct = ("acct", "http://x");
    let older = complete_of(&store, now() - 3 * DAY, acct, &["A", "B"], "0000000a").await;
    let both = complete_of(&store, now() - 2 * DAY, acct, &["A", "B"], "0000000b").await;
    let one = complete_of(&store, now() - DAY, acct, &["a"], "0000000c").await;
    let last = KeepPolicy {
        last: Count::Last(1),
        ..Default::default()
    };
    let pruned = prune(&store, &prune_req(last)).await.unwrap();
    assert_eq!(ids(&pruned.removed), [older.as_str()]);
    assert_eq!(ids(&pruned.kept), [one.as_str(), both.as_str()]);
    let kept = pruned.kept.iter().find(|d| d.id == both).unwrap();
    assert!(
        kept.reasons[0].contains("newest complete of table b"),
        "{kept:?}"
    );
    let req = ForgetRequest {
        ids: vec![both.clone()],
        abandoned_after: "7d".parse().unwrap(),
        dry_run: false,
        now: now(),
    };
    let e = forget(&store, &req).await.unwrap_err();
    assert!(e.to_string().contains("table(s) b"), "{e}");
}

/// Regression: credentials that may not delete (a SAS without `d`) left the backup
/// marked `deleting` after the first refused delete: restore refused it, and running
/// again never finished. Nothing is marked now, and the refusal is a usage error.
#[tokio::test]
async fn credentials_that_may_not_delete_mark_nothing() {
    let (blobs, store) = fakes();
    let old = complete(&store, now() - 2 * DAY, "acct", "0000000a").await;
    complete(&store, now() - DAY, "acct", "0000000b").await;
    let denied =
        tablevault_core::testing::service("Delete Blob", 403, "AuthorizationPermissionMismatch");
    blobs.fail(
        tablevault_core::testing::Op::Delete,
        &old,
        tablevault_core::testing::Strike::Before,
        denied,
    );
    let req = ForgetRequest {
        ids: vec![old.clone()],
        abandoned_after: "7d".parse().unwrap(),
        dry_run: false,
        now: now(),
    };
    let before = blobs.names();
    let e = forget(&store, &req).await.unwrap_err();
    assert!(
        matches!(e.root(), crate::Error::Storage(s) if s.status() == Some(403)),
        "{e}"
    );
    assert!(e.to_string().contains("nothing was removed"), "{e}");
    assert_eq!(blobs.names(), before, "no marker, nothing deleted");
}

/// Backups planned in the same second: `--keep-last 1` keeps one of them, the one that
/// also counts as the newest complete.
#[tokio::test]
async fn keep_last_one_keeps_one_of_backups_planned_in_the_same_second() {
    let (_, store) = fakes();
    let t = now() - DAY;
    let a = complete(&store, t, "acct", "0000000a").await;
    let b = complete(&store, t, "acct", "0000000b").await;
    let last = KeepPolicy {
        last: Count::Last(1),
        ..Default::default()
    };
    let pruned = prune(&store, &prune_req(last)).await.unwrap();
    assert_eq!(ids(&pruned.kept), [b.as_str()], "{:?}", pruned.kept);
    assert_eq!(ids(&pruned.removed), [a.as_str()]);
}

/// One backup whose manifest or plan is unreadable: `list`, `prune` and `forget` still
/// work over the others, show it as damaged, and `forget` removes it.
#[tokio::test]
async fn a_damaged_backup_is_listed_kept_by_prune_and_removed_by_forget() {
    let (blobs, store) = fakes();
    let old = complete(&store, now() - 3 * DAY, "acct", "0000000a").await;
    let bad_manifest = complete(&store, now() - 2 * DAY, "acct", "0000000b").await;
    let bad_plan = complete(&store, now() - 2 * DAY, "acct", "0000000c").await;
    let newest = complete(&store, now() - DAY, "acct", "0000000d").await;
    blobs.tamper(
        &BackupPaths::new(&bad_manifest).manifest(),
        bytes::Bytes::from_static(br#"{"format": 1, "backup_id": "#),
    );
    blobs.tamper(
        &BackupPaths::new(&bad_plan).job(),
        bytes::Bytes::from_static(b"\x00garbage"),
    );

    let listed = crate::listing::list(&store).await.unwrap();
    let status = |id: &str| listed.iter().find(|e| e.backup_id == id).map(|e| e.status);
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert_eq!(
        status(&old),
        Some(tablevault_core::protocol::JobStatus::Complete)
    );
    for id in [&bad_manifest, &bad_plan] {
        let e = listed.iter().find(|e| &e.backup_id == id).unwrap();
        assert_eq!(e.status, tablevault_core::protocol::JobStatus::Damaged);
        assert!(e.problem.is_some() && !e.created_at.is_empty(), "{e:?}");
    }

    let last = KeepPolicy {
        last: Count::Last(1),
        ..Default::default()
    };
    let pruned = prune(&store, &prune_req(last)).await.unwrap();
    assert_eq!(ids(&pruned.removed), [old.as_str()]);
    for id in [&bad_manifest, &bad_plan] {
        let kept = pruned.kept.iter().find(|d| &d.id == id).unwrap();
        assert_eq!(kept.state, "damaged");
        assert!(kept.reasons[0].contains("forget"), "{kept:?}");
    }
    assert!(pruned.kept.iter().any(|d| d.id == newest));

    let req = ForgetRequest {
        ids: vec![bad_manifest.clone(), bad_plan.clone()],
        abandoned_after: "7d".parse().unwrap(),
        dry_run: false,
        now: now(),
    };
    let forgotten = forget(&store, &req).await.unwrap();
    assert_eq!(forgotten.removed.len(), 2);
    assert_eq!(under(&blobs, &bad_manifest) + under(&blobs, &bad_plan), 0);
    assert_eq!(crate::listing::list(&store).await.unwrap().len(), 1);
}

/// A deletion stopped before each of its storage operations in turn: until it is done
/// the backup is either whole or shows as being deleted (never complete with data
/// missing), and the next prune finishes it.
#[tokio::test]
async fn a_deletion_stopped_at_any_step_is_finished_by_the_next_run() {
    let mut step = 0;
    loop {
        let mem = Arc::new(MemoryBlobs::new("c"));
        let plain = Store::new(mem.clone());
        let old = complete(&plain, now() - 2 * DAY, "acct", "0000000a").await;
        complete(&plain, now() - DAY, "acct", "0000000b").await;
        let whole = under(&mem, &old);
        let switch = CrashSwitch::at(step);
        let crashing = Store::new(Arc::new(CrashingBlobs {
            inner: mem.clone(),
            switch: switch.clone(),
        }));
        let req = prune_req(KeepPolicy {
            last: Count::Last(1),
            ..Default::default()
        });
        let run = tokio::spawn({
            let req = req.clone();
            async move { prune(&crashing, &req).await }
        });
        tokio::select! {
            r = run => {
                // No crash at this step: the run finished, and the job is done.
                let r = r.unwrap().unwrap();
                assert_eq!(ids(&r.removed), [old.as_str()]);
                assert_eq!(under(&mem, &old), 0);
                assert!(step > 5, "the run has steps");
                break;
            }
            _ = switch.crashed() => {}
        }
        let survey = survey::survey(&plain, now(), &req.abandoned_after)
            .await
            .unwrap();
        let seen = survey.iter().find(|b| b.id == old);
        let has_marker = mem.blob(&BackupPaths::new(&old).deleting()).is_some();
        match seen {
            Some(s) if s.kind == survey::Kind::Complete => {
                assert!(!has_marker);
                assert_eq!(
                    under(&mem, &old),
                    whole,
                    "complete means whole (step {step})"
                );
            }
            Some(s) => assert_eq!(s.kind, survey::Kind::Deleting, "step {step}"),
            None => assert_eq!(under(&mem, &old), 0, "step {step}"),
        }
        let r = prune(&plain, &req).await.unwrap();
        assert_eq!(
            under(&mem, &old),
            0,
            "finished after a stop at step {step}: {r:?}"
        );
        assert!(r.failed.is_empty());
        step += 1;
    }
}

/// A read of a backup that failed is told as the deletion that removed it, wherever the
/// deletion is: under way (its marker), or finished after the read began (the job gone,
/// the read's own error a missing file). A usage error where the job never was (an
/// unknown backup) and a failure of a backup nobody deletes stand as they were.
#[tokio::test]
async fn a_read_that_failed_under_a_deletion_is_told_as_that() {
    let (_, store) = fakes();
    let id = complete(&store, now() - DAY, "acct", "0000000a").await;
    let missing = || -> crate::Result<()> {
        Err(crate::Error::Storage(tablevault_core::testing::service(
            "Read Commit Record",
            404,
            "BlobNotFound",
        )))
    };
    let told = |r: crate::Result<()>| r.unwrap_err().to_string();

    // Nobody deletes it: the failure stands.
    let e = unless_removed(&store, &id, "then", missing()).await;
    assert!(told(e).contains("BlobNotFound"));

    // A deletion under way.
    let marker = json!({ "backup_id": id, "reason": "pruned", "at": "x", "by": "y" });
    store
        .overwrite(&BackupPaths::new(&id).deleting(), &marker)
        .await
        .unwrap();
    let e = unless_removed(&store, &id, "nothing done", missing()).await;
    assert!(matches!(e, Err(crate::Error::Invalid(_))));
    assert_eq!(
        told(e),
        format!("backup {id} is being deleted (prune or forget); nothing done")
    );

    // The deletion finished after the read began.
    let all = store.list_names(&format!("{id}/")).await.unwrap();
    store.delete_all(&all).await.unwrap();
    let e = unless_removed(&store, &id, "nothing done", missing()).await;
    assert_eq!(
        told(e),
        format!("backup {id} was deleted (prune or forget) while it was read; nothing done")
    );

    // Never there: the usage error stands.
    let unknown = Err(crate::Error::invalid("backup x not found"));
    let e = unless_removed(&store, &id, "nothing done", unknown).await;
    assert_eq!(told(e), "backup x not found");
    assert!(unless_removed(&store, &id, "-", Ok(())).await.is_ok());
}
