//! Distributed restore and verify against Azurite: exact round trips of every type, per
//! block and per blob tasks, each mode, a killed worker, a corrupt block, refused
//! backups, and verify's comparison with a live table.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use support::{
    Setup, back_up, backup_of, blob_client, numbered, restore_renamed, store, target, watch_opts,
    worker_config,
};
use tablevault_azure::StorageAccount;
use tablevault_azure::blob::PutOptions;
use tablevault_azure::table::{BatchOperation, EdmValue, Entity, TableClient};
use tablevault_cli::exit::{ExitCode, error_code};
use tablevault_coordinator::backup::run_backup;
use tablevault_coordinator::restore::{
    RestoreRequest, cancel, check_target, plan_and_enqueue, resume, run_restore, watch,
};
use tablevault_coordinator::state::load_manifest;
use tablevault_coordinator::verify::{VerifyRequest, verify};
use tablevault_core::format::Compression;
use tablevault_core::keys::EntityKey;
use tablevault_core::protocol::{CommitRecord, RestoreMode};
use tablevault_core::store::BackupPaths;
use tablevault_tests::{TestEnv, load_edge_table, scan_all, unique_table};
use tablevault_worker::{Worker, WorkerStats};
use tokio_util::sync::CancellationToken;

/// Asserts two tables hold the same entities, property by property, type by type.
fn assert_same_tables(restored: &[Entity], source: &[Entity]) {
    assert_eq!(restored.len(), source.len(), "entity counts");
    for (r, s) in restored.iter().zip(source) {
        assert_eq!(
            (&r.partition_key, &r.row_key),
            (&s.partition_key, &s.row_key)
        );
        assert!(
            r.same_data(s),
            "{:?}/{:?} differs in {:?}",
            s.partition_key,
            s.row_key,
            r.differences(s)
        );
        for (name, value) in &s.properties {
            assert_eq!(
                r.get(name).map(EdmValue::edm_type),
                Some(value.edm_type()),
                "type of {name}"
            );
        }
    }
}

/// A verify of every table of `backup_id` under its own name, against the tables in
/// `live` when given.
fn verify_request(backup_id: &str, live: Option<&StorageAccount>) -> VerifyRequest {
    VerifyRequest {
        backup_id: backup_id.to_string(),
        tables: None,
        renames: vec![],
        against: live.cloned(),
    }
}

/// Rewrites the commit record at `path` as `commit` (a test's damage; the product only
/// ever creates records).
async fn overwrite_record(t: &tablevault_coordinator::Location, path: &str, commit: &CommitRecord) {
    blob_client(t)
        .put_blob(
            path,
            Bytes::from(serde_json::to_vec(commit).unwrap()),
            &PutOptions::default(),
        )
        .await
        .unwrap();
}

/// The commit record of the first range of backup `backup_id`'s first table, and the
/// path it lies at (what a damage test rewrites).
async fn first_commit(
    t: &tablevault_coordinator::Location,
    backup_id: &str,
) -> (String, CommitRecord) {
    let blobs = store(t);
    let manifest = load_manifest(&blobs, backup_id).await.unwrap().unwrap();
    let path = manifest.tables[0].ranges[0].commit.clone();
    let commit = blobs.commit_record(&path).await.unwrap();
    (path, commit)
}

#[tokio::test]
async fn every_type_round_trips_through_backup_and_restore() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("src");
    let source = load_edge_table(&client, &table).await;
    for compression in [Compression::Zstd, Compression::None] {
        let t = target(&env.account);
        let mut req = backup_of(&env.account, &table);
        req.compression = compression;
        let backup = run_backup(&req, &t, &watch_opts(2, &env.account))
            .await
            .unwrap();
        assert_eq!(backup.status, "complete");
        let restored_table = unique_table("dst");
        let r = restore_renamed(&backup.backup_id, &env.account, &table, &restored_table);
        let report = run_restore(&r, &t, &watch_opts(2, &env.account))
            .await
            .unwrap();
        assert_eq!(report.status, "complete", "{report:?}");
        assert_eq!(report.written, source.len() as u64);
        let restored = scan_all(&client, &restored_table).await;
        assert_same_tables(&restored, &source);
        // Timestamp and ETag are the service's own, not copied.
        assert_ne!(restored[0].etag, source[0].etag);
    }
}

/// `--max-rate` is written into both jobs for every worker to read, refused at zero, and
/// a capped backup and restore lose nothing (the rate itself is unit-tested in the
/// worker's limiter: on the emulator only the cap holds a worker back).
#[tokio::test]
async fn a_rate_capped_backup_and_restore_keep_the_cap_in_their_jobs() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("capsrc");
    let source = load_edge_table(&client, &table).await;
    let t = target(&env.account);
    let mut req = backup_of(&env.account, &table);
    req.max_rate = Some(0);
    let refused = run_backup(&req, &t, &watch_opts(2, &env.account))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("--max-rate"), "{refused}");
    req.max_rate = Some(5_000);
    let backup = run_backup(&req, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(backup.status, "complete");
    let blobs = store(&t);
    let job = blobs.backup_job(&backup.backup_id).await.unwrap().unwrap();
    assert_eq!(job.options.max_rate, Some(5_000));

    let restored_table = unique_table("capdst");
    let mut r = restore_renamed(&backup.backup_id, &env.account, &table, &restored_table);
    r.max_rate = Some(0);
    let refused = run_restore(&r, &t, &watch_opts(2, &env.account))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("--max-rate"), "{refused}");
    r.max_rate = Some(5_000);
    let report = run_restore(&r, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "complete", "{report:?}");
    let job = tablevault_coordinator::restore::find_restore(&blobs, &report.restore_id)
        .await
        .unwrap();
    assert_eq!(job.max_rate, Some(5_000));
    assert_same_tables(&scan_all(&client, &restored_table).await, &source);
}

#[tokio::test]
async fn thousands_of_entities_restore_per_block_and_per_blob() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("many", 30, 100).await;
    let mut req = backup_of(&env.account, &table);
    req.block_bytes = 64 * 1024;
    req.blocks_per_blob = 3;
    req.ranges_per_table = Some(4);
    let backup = run_backup(&req, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    let blobs = store(&t);
    let manifest = load_manifest(&blobs, &backup.backup_id)
        .await
        .unwrap()
        .unwrap();
    let (n_blobs, n_blocks) = (manifest.tables[0].blobs, manifest.tables[0].blocks);
    assert!(
        n_blocks > n_blobs && n_blobs > 4,
        "{n_blobs} blobs, {n_blocks} blocks"
    );

    for (per_blob_max, expected_tasks) in [(u64::MAX, n_blobs), (0, n_blocks)] {
        let dst = unique_table("dst");
        let mut r = restore_renamed(&backup.backup_id, &env.account, &table, &dst);
        r.per_blob_max_bytes = per_blob_max;
        let report = run_restore(&r, &t, &watch_opts(3, &env.account))
            .await
            .unwrap();
        assert_eq!(report.status, "complete");
        assert_eq!(report.tables[0].tasks, expected_tasks);
        assert_eq!(report.written, 3000);
        assert_same_tables(&scan_all(&client, &dst).await, &source);
    }
}

#[tokio::test]
async fn each_mode_treats_existing_entities_as_documented() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("modes", 2, 50).await;
    let req = backup_of(&env.account, &table);
    let backup = run_backup(&req, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();

    let damaged_key = ("p000", "r00001");
    let deleted_key = ("p001", "r00002");
    for mode in [
        RestoreMode::Upsert,
        RestoreMode::Merge,
        RestoreMode::InsertSkip,
        RestoreMode::InsertFail,
        RestoreMode::Replace,
    ] {
        // The damage an application bug did: one entity overwritten (with an extra
        // property), one deleted, one added that the backup never saw.
        let dst = unique_table("dst");
        let ops: Vec<_> = source.iter().cloned().map(BatchOperation::Insert).collect();
        client.create_table(&dst).await.unwrap();
        for chunk in ops.chunks(50) {
            client.submit_batch(&dst, chunk).await.unwrap();
        }
        client
            .upsert_entity(
                &dst,
                &Entity::new(damaged_key.0, damaged_key.1)
                    .with("V", EdmValue::Int64(-1))
                    .with("Bug", EdmValue::Boolean(true)),
                false,
            )
            .await
            .unwrap();
        client
            .delete_entity(&dst, deleted_key.0, deleted_key.1)
            .await
            .unwrap();
        client
            .insert_entity(&dst, &Entity::new("p999", "new"))
            .await
            .unwrap();

        let mut r = restore_renamed(&backup.backup_id, &env.account, &table, &dst);
        r.mode = mode;
        let report = run_restore(&r, &t, &watch_opts(2, &env.account))
            .await
            .unwrap();
        let damaged = client
            .get_entity(&dst, damaged_key.0, damaged_key.1)
            .await
            .unwrap()
            .unwrap();
        let original = source
            .iter()
            .find(|e| (e.partition_key.as_str(), e.row_key.as_str()) == damaged_key)
            .unwrap();
        assert!(
            client
                .get_entity(&dst, deleted_key.0, deleted_key.1)
                .await
                .unwrap()
                .is_some(),
            "{mode:?} restores the deleted entity"
        );
        let added = client.get_entity(&dst, "p999", "new").await.unwrap();
        if mode == RestoreMode::Replace {
            assert!(
                added.is_none(),
                "replace deletes what the backup does not hold"
            );
            assert_eq!(report.deleted, 1);
        } else {
            assert!(added.is_some(), "{mode:?} never deletes");
            assert_eq!(report.deleted, 0);
        }
        if mode == RestoreMode::InsertFail {
            assert!(
                report.verification.is_none(),
                "an incomplete restore is not checked"
            );
        } else {
            let check = report.verification.as_ref().expect("verified by default");
            assert!(check.ok, "{mode:?}: {check:?}");
            assert_eq!(
                check.tables[0].counts.extra,
                u64::from(mode != RestoreMode::Replace),
                "{mode:?}: the entity the backup never saw is counted"
            );
        }
        let t0 = &report.tables[0];
        match mode {
            RestoreMode::Upsert => {
                assert_eq!(report.status, "complete");
                assert!(
                    damaged.same_data(original),
                    "upsert repairs: {:?}",
                    damaged.differences(original)
                );
                assert_eq!(t0.written, 100);
            }
            RestoreMode::Merge => {
                assert_eq!(report.status, "complete");
                assert_eq!(
                    damaged.get("V"),
                    original.get("V"),
                    "merge restores backed-up values"
                );
                assert_eq!(
                    damaged.get("Bug"),
                    Some(&EdmValue::Boolean(true)),
                    "merge keeps other properties"
                );
            }
            RestoreMode::InsertSkip => {
                assert_eq!(report.status, "complete");
                assert_eq!(
                    damaged.get("V"),
                    Some(&EdmValue::Int64(-1)),
                    "insert-skip leaves existing entities alone"
                );
                assert_eq!(
                    (t0.written, t0.identical, t0.skipped, t0.failed),
                    (1, 98, 1, 0)
                );
            }
            RestoreMode::Replace => {
                assert_eq!(report.status, "complete");
                assert_same_tables(&scan_all(&client, &dst).await, &source);
            }
            RestoreMode::InsertFail => {
                assert_eq!(report.status, "incomplete");
                assert_eq!(
                    damaged.get("V"),
                    Some(&EdmValue::Int64(-1)),
                    "insert-fail never overwrites"
                );
                assert_eq!((t0.written, t0.identical, t0.failed), (1, 98, 1));
                assert_eq!(report.failures.len(), 1);
                assert_eq!(
                    report.failures[0].keys,
                    vec![EntityKey::new(damaged_key.0, damaged_key.1)]
                );
                assert_eq!(report.failures[0].code.as_deref(), Some("Conflict"));
                // The report says: fix the cause, then `resume` retries what was not
                // written. Regression: resume took the task with failed batches for
                // done and wrote nothing.
                client
                    .delete_entity(&dst, damaged_key.0, damaged_key.1)
                    .await
                    .unwrap();
                let resumed = resume(
                    &t,
                    &report.restore_id,
                    &env.account,
                    &watch_opts(2, &env.account),
                )
                .await
                .unwrap();
                assert_eq!(resumed.status, "complete", "{resumed:?}");
                assert!(resumed.failures.is_empty(), "{:?}", resumed.failures);
                let repaired = client
                    .get_entity(&dst, damaged_key.0, damaged_key.1)
                    .await
                    .unwrap()
                    .expect("resume wrote the entity whose batch had failed");
                assert!(repaired.same_data(original));
            }
        }
    }
}

/// A restore under way: a backup of the setup's table in one range, a restore of it
/// into a new table at `max_rate`, planned and enqueued, and one worker (visibility
/// `visibility`) that has started writing it.
struct UnderWay {
    job: tablevault_core::protocol::RestoreJob,
    dst: String,
    stop: CancellationToken,
    worker: tokio::task::JoinHandle<Result<(), tablevault_azure::Error>>,
}

async fn restore_under_way(s: &Setup, max_rate: Option<u32>, visibility: Duration) -> UnderWay {
    let mut req = backup_of(&s.env.account, &s.table);
    req.ranges_per_table = Some(1);
    let backup = run_backup(&req, &s.t, &watch_opts(1, &s.env.account))
        .await
        .unwrap();
    let dst = unique_table("dst");
    let mut r = restore_renamed(&backup.backup_id, &s.env.account, &s.table, &dst);
    r.max_rate = max_rate;
    let job = plan_and_enqueue(&r, &s.t).await.unwrap();
    let stats = Arc::new(WorkerStats::default());
    let w = Worker::new(
        worker_config(&s.t, &s.env.account, visibility),
        stats.clone(),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let worker = tokio::spawn(w.run(stop.clone()));
    while stats.entities.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    UnderWay {
        job,
        dst,
        stop,
        worker,
    }
}

#[tokio::test]
async fn a_killed_worker_mid_restore_is_redone() {
    let s = numbered("kill", 20, 100).await;
    // A worker starts writing, then dies without a word.
    let w = restore_under_way(&s, None, Duration::from_secs(2)).await;
    w.worker.abort();
    let _ = w.worker.await;
    let partial = scan_all(&s.client, &w.dst).await.len();
    assert!(
        partial < 2000,
        "the first worker was stopped mid-way ({partial} written)"
    );

    let report = watch(&s.t, &w.job, &s.env.account, &watch_opts(2, &s.env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "complete");
    assert_same_tables(&scan_all(&s.client, &w.dst).await, &s.source);
}

/// Regression: a commit record that lost its blobs, still recording its entities, was
/// restored as nothing and reported complete (exit 0); with `replace` into the live
/// table the restore then deleted every entity the backup no longer listed. A data
/// blob cut short or gone wrote the other ranges, then poisoned a task. The records'
/// counts and the data blobs' sizes are now checked before anything is created or
/// written.
#[tokio::test]
async fn a_backup_whose_files_disagree_with_its_records_is_refused_before_anything_is_written() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("lostblobs", 4, 100).await;
    // Each damage to a fresh backup of the same table: a commit record that lost its
    // blobs, a data blob cut short (Azure answers a range past its end with what there
    // is), a data blob gone.
    for damage in ["record lost its blobs", "blob cut short", "blob deleted"] {
        let mut req = backup_of(&env.account, &table);
        req.ranges_per_table = Some(2);
        let backup = run_backup(&req, &t, &watch_opts(2, &env.account))
            .await
            .unwrap();
        let (path, mut commit) = first_commit(&t, &backup.backup_id).await;
        assert!(commit.entities > 0);
        let data = commit.blobs[0].name.clone();
        let client_of_blobs = blob_client(&t);
        let named = match damage {
            "record lost its blobs" => {
                commit.blobs.clear();
                overwrite_record(&t, &path, &commit).await;
                commit.task.clone()
            }
            "blob cut short" => {
                let bytes = client_of_blobs.get(&data).await.unwrap();
                client_of_blobs
                    .put_blob(
                        &data,
                        bytes.slice(..bytes.len() / 2),
                        &PutOptions::default(),
                    )
                    .await
                    .unwrap();
                data.clone()
            }
            _ => {
                assert!(client_of_blobs.delete(&data).await.unwrap());
                data.clone()
            }
        };

        let dst = unique_table("lostdst");
        for (target_table, mode) in [(&table, RestoreMode::Replace), (&dst, RestoreMode::Upsert)] {
            let mut r = restore_renamed(&backup.backup_id, &env.account, &table, target_table);
            r.mode = mode;
            let err = run_restore(&r, &t, &watch_opts(2, &env.account))
                .await
                .expect_err("a backup whose files disagree with its records is refused");
            assert!(
                err.to_string().contains("nothing was written") && err.to_string().contains(&named),
                "{damage}: {err}"
            );
            assert_eq!(error_code(&err), ExitCode::Mismatch, "{damage}: {err}");
        }
        assert_same_tables(&scan_all(&client, &table).await, &source);
        assert!(
            !client.table_exists(&dst).await.unwrap(),
            "{damage}: no table was created"
        );
    }
}

#[tokio::test]
async fn a_corrupt_block_is_reported_and_nothing_from_it_is_written() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("corrupt", 4, 250).await;
    let mut req = backup_of(&env.account, &table);
    req.ranges_per_table = Some(4);
    req.block_bytes = 64 * 1024;
    req.blocks_per_blob = 1;
    req.compression = Compression::Zstd;
    let backup = run_backup(&req, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    let blobs = store(&t);
    let raw = blob_client(&t);
    let manifest = load_manifest(&blobs, &backup.backup_id)
        .await
        .unwrap()
        .unwrap();
    let commit = blobs
        .commit_record(&manifest.tables[0].ranges[1].commit)
        .await
        .unwrap();
    let victim = &commit.blobs[0];
    let mut bytes = raw.get(&victim.name).await.unwrap().to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    raw.put_blob(&victim.name, Bytes::from(bytes), &PutOptions::default())
        .await
        .unwrap();
    let span = (
        victim.blocks[0].first_key.clone(),
        victim.blocks[0].last_key.clone(),
    );

    let dst = unique_table("dst");
    let r = restore_renamed(&backup.backup_id, &env.account, &table, &dst);
    let report = run_restore(&r, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "incomplete", "never reported as a success");
    assert_eq!(report.poisoned.len(), 1);
    assert!(
        report.poisoned[0].reason.contains("checksum mismatch"),
        "{}",
        report.poisoned[0].reason
    );
    let restored = scan_all(&client, &dst).await;
    let in_span = |e: &Entity| {
        let k = EntityKey::new(&e.partition_key, &e.row_key);
        k >= span.0 && k <= span.1
    };
    assert!(
        !restored.iter().any(in_span),
        "nothing from the corrupt block was written"
    );
    let expected: Vec<_> = source.iter().filter(|e| !in_span(e)).cloned().collect();
    assert_same_tables(&restored, &expected);

    // verify finds the same block, and the live comparison does not blame the table
    // for entities it could not read from the backup.
    let v = verify(&t, &verify_request(&backup.backup_id, Some(&env.account)))
        .await
        .unwrap();
    assert_eq!(v.status, "mismatch");
    assert_eq!(v.tables[0].bad_blocks, 1);
    assert_eq!(
        (
            v.tables[0].missing_in_live,
            v.tables[0].extra_in_live,
            v.tables[0].different
        ),
        (0, 0, 0)
    );
    assert!(
        v.problems.iter().any(|p| p.contains("checksum mismatch")),
        "{:?}",
        v.problems
    );
}

#[tokio::test]
async fn restore_refuses_incomplete_backups_and_unknown_versions() {
    let Setup {
        env,
        client: _,
        table,
        source: _,
        t,
    } = numbered("refuse", 1, 10).await;
    let req = backup_of(&env.account, &table);
    // Planned but never run: no manifest.
    let job = tablevault_coordinator::backup::plan(&req, &t)
        .await
        .unwrap();
    let err = run_restore(
        &RestoreRequest::new(&job.backup_id, env.account.clone()),
        &t,
        &watch_opts(0, &env.account),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("incomplete"), "{err}");
    assert_eq!(error_code(&err), ExitCode::Usage);
    assert_eq!(error_code(&err) as i32, 2);

    // A manifest from a future format.
    let backup = run_backup(&req, &t, &watch_opts(1, &env.account))
        .await
        .unwrap();
    let path = BackupPaths::new(&backup.backup_id).manifest();
    let raw = blob_client(&t);
    let mut m: serde_json::Value = serde_json::from_slice(&raw.get(&path).await.unwrap()).unwrap();
    m["format"] = 3.into();
    raw.put_blob(&path, Bytes::from(m.to_string()), &PutOptions::default())
        .await
        .unwrap();
    let err = run_restore(
        &RestoreRequest::new(&backup.backup_id, env.account.clone()),
        &t,
        &watch_opts(0, &env.account),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("format version 3"), "{err}");

    let err = run_restore(
        &RestoreRequest::new("20200101T000000Z-00000000", env.account.clone()),
        &t,
        &watch_opts(0, &env.account),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
}

#[tokio::test]
async fn verify_finds_every_difference_with_a_live_table() {
    let Setup {
        env,
        client,
        table,
        source: _,
        t,
    } = numbered("live", 3, 40).await;
    let req = backup_of(&env.account, &table);
    let backup = run_backup(&req, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    let request = verify_request(&backup.backup_id, Some(&env.account));
    let clean = verify(&t, &request).await.unwrap();
    assert_eq!(clean.status, "ok", "{:?}", clean.problems);
    assert_eq!(clean.tables[0].entities_read, 120);

    client
        .upsert_entity(
            &table,
            &Entity::new("p001", "r00005").with("V", EdmValue::Int32(5)),
            false,
        )
        .await
        .unwrap();
    client
        .delete_entity(&table, "p002", "r00000")
        .await
        .unwrap();
    client
        .insert_entity(&table, &Entity::new("p000", "zzz"))
        .await
        .unwrap();
    let v = verify(&t, &request).await.unwrap();
    assert_eq!(v.status, "mismatch");
    let tr = &v.tables[0];
    assert_eq!(
        (tr.missing_in_live, tr.extra_in_live, tr.different),
        (1, 1, 1)
    );
    let different = v
        .differences
        .iter()
        .find(|d| d.kind == "different")
        .unwrap();
    assert_eq!(different.key, EntityKey::new("p001", "r00005"));
    assert_eq!(different.properties, vec!["Pad", "V"]);

    // The table dropped: every entity missing, a mismatch (exit 4), not a usage error
    // (exit 2) that ended the comparison.
    client.delete_table(&table).await.unwrap();
    let v = verify(&t, &request).await.unwrap();
    assert_eq!(v.status, "mismatch");
    assert_eq!(v.tables[0].missing_in_live, 120);
    assert_eq!(
        v.tables[0].entities_read, 120,
        "the backup's blocks are still checked"
    );
    assert!(
        v.problems.iter().any(|p| p.contains("does not exist")),
        "{:?}",
        v.problems
    );
}

/// The check after writing sees what happened to the target between the write and the
/// check: an entity changed, one deleted, one added. It names the keys, fails the
/// restore, and counts the extra without calling it a failure (upsert keeps extras).
#[tokio::test]
async fn the_check_after_writing_catches_a_target_changed_behind_its_back() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("check", 5, 40).await;
    let backup = back_up(&env.account, &table, &t, 2).await;
    let dst = unique_table("dst");
    let mut r = restore_renamed(&backup.backup_id, &env.account, &table, &dst);
    r.verify = false;
    let job = plan_and_enqueue(&r, &t).await.unwrap();
    let written = watch(&t, &job, &env.account, &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(written.status, "complete");
    assert!(written.verification.is_none());

    // Between write and check, something else writes to the target.
    let changed = &source[7];
    client
        .upsert_entity(
            &dst,
            &Entity::new(&changed.partition_key, &changed.row_key).with("V", EdmValue::Int32(0)),
            false,
        )
        .await
        .unwrap();
    let gone = &source[123];
    client
        .delete_entity(&dst, &gone.partition_key, &gone.row_key)
        .await
        .unwrap();
    client
        .insert_entity(&dst, &Entity::new("p001", "zz-extra"))
        .await
        .unwrap();

    let check = check_target(&t, &job, &env.account, &written)
        .await
        .unwrap();
    assert!(!check.ok);
    let c = &check.tables[0].counts;
    assert_eq!(
        (c.backup, c.matching, c.missing, c.different, c.extra),
        (200, 198, 1, 1, 1)
    );
    let named: Vec<(String, &str)> = check.tables[0]
        .differences
        .iter()
        .map(|d| (d.key.to_string(), d.kind.as_str()))
        .collect();
    for (e, kind) in [(changed, "different"), (gone, "missing")] {
        let k = EntityKey::new(&e.partition_key, &e.row_key).to_string();
        assert!(
            named.contains(&(k.clone(), kind)),
            "{k} {kind} in {named:?}"
        );
    }

    // The same through the whole restore: an upsert repairs the changes, so the check
    // passes, and the extra is reported, not deleted.
    r.verify = true;
    let report = run_restore(&r, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "complete");
    let v = report.verification.unwrap();
    assert!(v.ok);
    assert_eq!(v.tables[0].counts.extra, 1);
}

/// Deletes one entity of the target when the watch ends, that is after every task has
/// written and before the check reads the target back.
struct DeleteWhenWritten {
    client: TableClient,
    table: String,
    key: (String, String),
    /// `finish` comes again after the read-back phase: delete once.
    done: std::sync::atomic::AtomicBool,
}

impl tablevault_coordinator::Progress for DeleteWhenWritten {
    fn update(&self, _: tablevault_coordinator::Snapshot) {}

    fn finish(&self) {
        if self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        // On the test's runtime: the HTTP connection pool is shared process-wide, and a
        // connection opened on a runtime that then ends would stall the next request.
        let (pk, rk) = &self.key;
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current()
                .block_on(self.client.delete_entity(&self.table, pk, rk))
                .unwrap()
        });
    }
}

/// A target that differs after writing fails the restore: status `mismatch`, exit 4,
/// the key named.
#[tokio::test(flavor = "multi_thread")]
async fn a_mismatch_after_writing_fails_the_restore_with_exit_4() {
    let Setup {
        env,
        client,
        table,
        t,
        ..
    } = numbered("mism", 2, 30).await;
    let backup = back_up(&env.account, &table, &t, 1).await;
    let dst = unique_table("dst");
    let r = restore_renamed(&backup.backup_id, &env.account, &table, &dst);
    let mut opts = watch_opts(2, &env.account);
    opts.progress = Some(Arc::new(DeleteWhenWritten {
        client: client.clone(),
        table: dst.clone(),
        key: ("p001".into(), "r00007".into()),
        done: Default::default(),
    }));
    let report = run_restore(&r, &t, &opts).await.unwrap();
    assert_eq!(report.status, "mismatch");
    let v = report.verification.as_ref().unwrap();
    assert_eq!(v.tables[0].counts.missing, 1);
    assert_eq!(
        v.tables[0].differences[0].key,
        EntityKey::new("p001", "r00007")
    );
    assert_eq!(
        tablevault_cli::exit::outcome_code(&tablevault_cli::Outcome::Restore(report)),
        ExitCode::Mismatch
    );
}

/// Regression: `cancel` stopped only tasks not yet claimed; a task a worker was running
/// wrote on to its end (a whole restore of 6,000 landed after `cancel` said 0 of
/// 6,000). The attempt now stops within a couple of seconds of the cancel.
#[tokio::test]
async fn a_cancelled_restore_stops_the_task_a_worker_is_running() {
    let s = numbered("inflight", 4, 500).await;
    // 2,000 entities at 200 a second: about ten seconds.
    let w = restore_under_way(&s, Some(200), Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let cancelled = cancel(&s.t, &w.job.restore_id).await.unwrap();
    // Its report is timed from the restore's start to the cancel, not by the look at it
    // (which said "written in 0.0 s").
    assert!(
        cancelled.duration_seconds >= 1.0,
        "{}",
        cancelled.duration_seconds
    );
    // The worker reads the restore's state every two seconds and stops at its next
    // batch.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let settled = scan_all(&s.client, &w.dst).await.len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = scan_all(&s.client, &w.dst).await.len();
    w.stop.cancel();
    let _ = w.worker.await;
    assert_eq!(later, settled, "nothing written after the cancel took hold");
    assert!(
        settled < 2000,
        "the task was stopped mid-way ({settled} written)"
    );
}

/// A cancelled restore writes nothing more: its queued tasks are dropped by the workers
/// that find them, a watch of it ends `cancelled`, and it cannot be resumed.
#[tokio::test]
async fn a_cancelled_restore_writes_nothing_more_and_cannot_be_resumed() {
    let Setup {
        env,
        client,
        table,
        t,
        ..
    } = numbered("cancel", 3, 50).await;
    let backup = back_up(&env.account, &table, &t, 1).await;
    let dst = unique_table("dst");
    let r = restore_renamed(&backup.backup_id, &env.account, &table, &dst);
    let job = plan_and_enqueue(&r, &t).await.unwrap();
    let cancelled = cancel(&t, &job.restore_id).await.unwrap();
    assert_eq!(cancelled.status, "cancelled");
    // Workers that come along drop its tasks; the watch says it was cancelled.
    let report = watch(&t, &job, &env.account, &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "cancelled");
    assert_eq!(
        scan_all(&client, &dst).await.len(),
        0,
        "nothing was written"
    );
    let e = resume(
        &t,
        &job.restore_id,
        &env.account,
        &watch_opts(1, &env.account),
    )
    .await
    .unwrap_err();
    assert_eq!(error_code(&e), ExitCode::Usage);
    assert!(e.to_string().contains("cancelled"), "{e}");
    // Unknown restore ids are usage errors too.
    let e = cancel(&t, "20200101T000000Z-00000000").await.unwrap_err();
    assert!(e.to_string().contains("not found"), "{e}");
    // A backup id given for a restore's says so.
    let e = cancel(&t, &backup.backup_id).await.unwrap_err();
    assert!(e.to_string().contains("is a backup, not a restore"), "{e}");
}

/// Regression: a restore that read its backup's manifest while `prune` removed the
/// backup met the commit records gone and exited 1 with a raw `BlobNotFound` (a retry
/// cannot help), and a verify of it would have called the backup damaged (exit 4). Both
/// are the deletion's refusal now, exit 2, and nothing is created in the target.
/// Modelled at the moment the race makes: the deletion's marker written and the commit
/// records gone, the manifest still there to read.
#[tokio::test]
async fn a_restore_that_meets_its_backup_being_deleted_says_so() {
    let Setup {
        env,
        client,
        table,
        source: _,
        t,
    } = numbered("gone", 2, 10).await;
    let backup = back_up(&env.account, &table, &t, 1).await;
    let id = &backup.backup_id;
    let paths = BackupPaths::new(id);
    let s = store(&t);
    let marker = tablevault_coordinator::retention::DeletionRecord {
        backup_id: id.clone(),
        created_at: None,
        source_account: None,
        tables: vec![table.clone()],
        reason: "pruned".into(),
        at: "2026-11-28T00:00:00Z".into(),
        by: "test".into(),
    };
    s.overwrite(&paths.deleting(), &marker).await.unwrap();
    let commits = s.list_names(&paths.commits_root()).await.unwrap();
    assert!(!commits.is_empty());
    s.delete_all(&commits).await.unwrap();

    let renamed = unique_table("gonecopy");
    let req = restore_renamed(id, &env.account, &table, &renamed);
    let err = run_restore(&req, &t, &watch_opts(1, &env.account))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!("backup {id} is being deleted")),
        "{text}"
    );
    assert!(text.contains("stopped before writing"), "{text}");
    assert_eq!(error_code(&err), ExitCode::Usage);
    assert!(!client.table_exists(&renamed).await.unwrap());

    let err = verify(&t, &verify_request(id, None)).await.unwrap_err();
    assert!(err.to_string().contains("is being deleted"), "{err}");
    assert_eq!(error_code(&err), ExitCode::Usage);
}

/// Format 2 (`--format 2`) keeps a small range's one block in its commit record: a
/// backup of small tables writes their commit records and no data blob, and restores
/// and verifies exactly. The same tables backed up in format 1 (the default) have every
/// range in data blobs and restore the same. Either way every data blob the records
/// name is there and nothing else is.
#[tokio::test]
async fn small_ranges_are_inline_in_format_2_and_both_formats_restore_exactly() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let prefix = unique_table("inl");
    let loaded = tablevault_tests::load_many_tables(&client, &prefix, 4, Some(1)).await;
    for unknown in [0, 3] {
        let mut req = tablevault_coordinator::backup::BackupRequest::new(env.account.clone());
        req.format = unknown;
        let refused = run_backup(&req, &target(&env.account), &watch_opts(0, &env.account))
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("--format"), "{refused}");
    }
    assert_eq!(
        tablevault_coordinator::backup::BackupRequest::new(env.account.clone()).format,
        1,
        "format 1 unless asked"
    );
    for format in [1, 2] {
        let t = target(&env.account);
        let mut req = tablevault_coordinator::backup::BackupRequest::new(env.account.clone());
        req.tables = Some(loaded.keys().cloned().collect());
        req.compression = Compression::Zstd;
        req.format = format;
        let backup = run_backup(&req, &t, &watch_opts(2, &env.account))
            .await
            .unwrap();
        assert_eq!(backup.status, "complete");
        assert_eq!(backup.format, format, "the report says which");
        let blobs = store(&t);
        let manifest = load_manifest(&blobs, &backup.backup_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(manifest.format, format);
        let paths = BackupPaths::new(&backup.backup_id);
        let mut named = std::collections::BTreeSet::new();
        for mt in &manifest.tables {
            for r in &mt.ranges {
                let commit = blobs.commit_record(&r.commit).await.unwrap();
                assert_eq!(commit.format, format);
                let inline = commit.blobs.iter().any(|b| b.is_inline());
                // Format 1 never; format 2 always for a small table (a large table's
                // ranges may be one small block too, once compressed).
                if format == 1 || loaded[&mt.name].len() == 3 {
                    assert_eq!(inline, format == 2, "{}", mt.name);
                }
                named.extend(commit.data_blob_names().map(str::to_string));
            }
        }
        let listed: std::collections::BTreeSet<String> = blobs
            .list_names(&paths.data_root())
            .await
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(listed, named, "format {format}");

        let request = verify_request(&backup.backup_id, Some(&env.account));
        let checked = verify(&t, &request).await.unwrap();
        assert_eq!(checked.status, "ok", "{:?}", checked.problems);

        let mut r = RestoreRequest::new(&backup.backup_id, env.account.clone());
        r.renames = loaded
            .keys()
            .map(|name| (name.clone(), format!("{name}f{format}")))
            .collect();
        let report = run_restore(&r, &t, &watch_opts(2, &env.account))
            .await
            .unwrap();
        assert_eq!(report.status, "complete", "{report:?}");
        for (name, source) in &loaded {
            let restored = scan_all(&client, &format!("{name}f{format}")).await;
            assert_same_tables(&restored, source);
        }
    }
}

/// A commit record whose inline blob was damaged (one byte of its data changed, its
/// checksum kept) is reported by verify, and a restore of it writes nothing of it.
#[tokio::test]
async fn a_damaged_inline_blob_is_found_by_verify_and_never_restored() {
    let Setup {
        env,
        client,
        table,
        source: _,
        t,
    } = numbered("dmginl", 1, 5).await;
    let mut req = backup_of(&env.account, &table);
    req.format = 2;
    let backup = run_backup(&req, &t, &watch_opts(1, &env.account))
        .await
        .unwrap();
    let (path, mut commit) = first_commit(&t, &backup.backup_id).await;
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let inline = commit.blobs[0]
        .inline
        .as_deref()
        .expect("a small table is inline");
    let mut bytes = b64.decode(inline).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    commit.blobs[0].inline = Some(b64.encode(&bytes));
    overwrite_record(&t, &path, &commit).await;

    let request = verify_request(&backup.backup_id, None);
    let checked = verify(&t, &request).await.unwrap();
    assert_ne!(checked.status, "ok");
    assert!(
        checked
            .problems
            .iter()
            .any(|p| p.contains("inline blob") && p.contains("checksum mismatch")),
        "{:?}",
        checked.problems
    );

    let dst = unique_table("dmginldst");
    let r = restore_renamed(&backup.backup_id, &env.account, &table, &dst);
    let report = run_restore(&r, &t, &watch_opts(1, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "incomplete", "never reported as a success");
    assert_eq!(report.poisoned.len(), 1);
    assert!(
        report.poisoned[0].reason.contains("inline blob")
            && report.poisoned[0].reason.contains("checksum mismatch"),
        "{}",
        report.poisoned[0].reason
    );
    assert!(
        scan_all(&client, &dst).await.is_empty(),
        "nothing of it written"
    );
}

/// A commit record whose blob entry is malformed (an inline blob whose bytes are gone or
/// fewer than recorded, an inline blob in a record of format 1, an entry with neither a
/// data blob's name nor bytes) is refused before any table is created or written: a
/// restore that found it only in the task wrote the other ranges first.
#[tokio::test]
async fn a_commit_record_with_a_malformed_blob_entry_is_refused_before_anything_is_written() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let Setup {
        env,
        client,
        table,
        source: _,
        t,
    } = numbered("shape", 2, 50).await;
    let raw = blob_client(&t);
    for damage in [
        "inline bytes gone",
        "inline bytes short",
        "inline in format 1",
        "name emptied",
    ] {
        let mut req = backup_of(&env.account, &table);
        req.compression = Compression::Zstd;
        req.format = if damage.starts_with("inline bytes") {
            2
        } else {
            1
        };
        let backup = run_backup(&req, &t, &watch_opts(1, &env.account))
            .await
            .unwrap();
        let (path, mut commit) = first_commit(&t, &backup.backup_id).await;
        let blob = &mut commit.blobs[0];
        assert_eq!(blob.is_inline(), req.format == 2, "{damage}");
        match damage {
            "inline bytes gone" => blob.inline = None,
            "inline bytes short" => {
                let mut bytes = b64.decode(blob.inline.as_deref().unwrap()).unwrap();
                bytes.pop();
                blob.inline = Some(b64.encode(&bytes));
            }
            "inline in format 1" => {
                let bytes = raw.get(&blob.name).await.unwrap();
                blob.name = String::new();
                blob.inline = Some(b64.encode(&bytes));
            }
            _ => blob.name = String::new(),
        }
        overwrite_record(&t, &path, &commit).await;

        let request = verify_request(&backup.backup_id, None);
        let checked = verify(&t, &request).await.unwrap();
        assert_ne!(checked.status, "ok", "{damage}");
        assert!(
            checked.problems.iter().any(|p| p.contains(&commit.task)),
            "{damage}: {:?}",
            checked.problems
        );

        let dst = unique_table("shapedst");
        let r = restore_renamed(&backup.backup_id, &env.account, &table, &dst);
        let err = run_restore(&r, &t, &watch_opts(1, &env.account))
            .await
            .expect_err("a malformed record is refused");
        assert!(
            err.to_string().contains("nothing was written")
                && err.to_string().contains(&commit.task),
            "{damage}: {err}"
        );
        assert_eq!(error_code(&err), ExitCode::Mismatch, "{damage}: {err}");
        assert!(
            !client.table_exists(&dst).await.unwrap(),
            "{damage}: no table was created"
        );
    }
}
