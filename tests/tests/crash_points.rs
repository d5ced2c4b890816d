//! Crash points: a worker, or the coordinator, dies just before each step of the
//! protocol in turn (every storage and queue operation is a step); then a fresh
//! coordinator with fresh workers carries the job on. Whatever the step, the backup ends
//! complete with exactly the source's entities and nothing left on the queue.
//!
//! Run with `--nocapture` to see the matrix (step, outcome).

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{backup_of, store, target, watch_opts, worker_config};
use tablevault_azure::blob::BlobClient;
use tablevault_azure::queue::QueueClient;
use tablevault_azure::table::Entity;
use tablevault_coordinator::backup::{StatusOptions, enqueue, plan, run_backup, status};
use tablevault_coordinator::location::Backends;
use tablevault_coordinator::state::load_manifest;
use tablevault_coordinator::{Location, WatchOptions};
use tablevault_core::protocol::poison_queue_name;
use tablevault_core::queue::TaskQueue;
use tablevault_core::store::{BlobStorage, Store};
use tablevault_core::testing::{CrashSwitch, CrashingBlobs, CrashingQueue};
use tablevault_tests::{TestEnv, load_numbered, unique_table};
use tablevault_worker::{Worker, WorkerBackends, WorkerStats};
use tokio_util::sync::CancellationToken;

fn crashing_queue(t: &Location, name: &str, switch: &Arc<CrashSwitch>) -> Arc<dyn TaskQueue> {
    Arc::new(CrashingQueue {
        inner: Arc::new(QueueClient::new(&t.account, name).unwrap()),
        switch: switch.clone(),
    })
}

fn crashing_store(t: &Location, switch: &Arc<CrashSwitch>) -> Store {
    let blobs: Arc<dyn BlobStorage> = Arc::new(BlobClient::new(&t.account, &t.container).unwrap());
    Store::new(Arc::new(CrashingBlobs {
        inner: blobs,
        switch: switch.clone(),
    }))
}

/// Finishes the job with a fresh coordinator and workers and checks every table of
/// `sources` exactly, and that the queue ends empty.
async fn resume_and_check(
    t: &Location,
    id: &str,
    env: &TestEnv,
    sources: &[(String, Vec<Entity>)],
) -> String {
    let wait = StatusOptions {
        wait: true,
        retry_poisoned: false,
    };
    let report = match status(t, id, wait, &watch_opts(2, &env.account)).await {
        Ok(r) => r,
        Err(e) => return format!("RESUME FAILED: {e}"),
    };
    if report.status != "complete" {
        return format!("WRONG: {} with {} entities", report.status, report.entities);
    }
    check_tables(t, id, env, sources).await
}

/// Checks a complete backup against `sources` exactly, then that the queue empties.
async fn check_tables(
    t: &Location,
    id: &str,
    env: &TestEnv,
    sources: &[(String, Vec<Entity>)],
) -> String {
    let blobs = store(t);
    let manifest = load_manifest(&blobs, id).await.unwrap().unwrap();
    for (table, source) in sources {
        let Some(plan) = manifest.tables.iter().find(|m| &m.name == table) else {
            return format!("WRONG: table {table} is not in the manifest");
        };
        let mut got = Vec::new();
        for r in &plan.ranges {
            let commit = blobs.commit_record(&r.commit).await.unwrap();
            for b in &commit.blobs {
                for block in &b.blocks {
                    let d = blobs
                        .read_block(b, block, manifest.compression)
                        .await
                        .unwrap();
                    got.extend(d.batches.into_iter().flatten());
                }
            }
        }
        if &got != source {
            return format!("WRONG: the backup of {table} differs from the source");
        }
    }
    // A message the dead process held reappears when its lease lapses; the next worker
    // to claim it finds its task done and drops it.
    let queue = QueueClient::new(&t.account, &t.queue).unwrap();
    let w = Worker::new(
        worker_config(t, &env.account, LEASE),
        Arc::new(WorkerStats::default()),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let h = tokio::spawn(w.run(stop.clone()));
    let mut empty = false;
    for _ in 0..100 {
        if queue.approximate_count().await.unwrap() == 0 {
            empty = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    let _ = h.await;
    if empty {
        "complete, exact, queue empty".into()
    } else {
        "WRONG: messages left on the queue".into()
    }
}

/// Lease of the dying workers: short, so what they held comes back quickly.
const LEASE: Duration = Duration::from_secs(2);

/// Crash points per test: an even sample in the suite, every step with
/// `TABLEVAULT_ALL_CRASH_POINTS=1` (see the README).
fn sample_size() -> usize {
    if std::env::var_os("TABLEVAULT_ALL_CRASH_POINTS").is_some() {
        usize::MAX
    } else {
        8
    }
}

/// The steps to crash at: all of them when few, else an even sample that always
/// includes the first and the last.
fn points(total: usize, most: usize) -> Vec<usize> {
    if total <= most {
        (0..total).collect()
    } else {
        (0..most)
            .map(|i| i * (total - 1) / (most - 1).max(1))
            .collect()
    }
}

/// Runs one worker on the job's queue whose storage and queue die before step `at`
/// (`usize::MAX`: never), until it dies or the backup is complete; returns the step it
/// died before and how many steps it took.
async fn worker_dies_before(
    at: usize,
    t: &Location,
    env: &TestEnv,
    backup_id: &str,
) -> (String, usize) {
    let switch = CrashSwitch::at(at);
    let store_for = {
        let (t, switch) = (t.clone(), switch.clone());
        Arc::new(move |_: &str| Ok(crashing_store(&t, &switch)))
    };
    let backends = WorkerBackends {
        queue: crashing_queue(t, &t.queue, &switch),
        lease_queue: crashing_queue(t, &t.queue, &switch),
        poison: crashing_queue(t, &poison_queue_name(&t.queue), &switch),
        store_for,
    };
    let config = worker_config(t, &env.account, LEASE);
    let worker = Worker::with_backends(config, Arc::new(WorkerStats::default()), backends);
    let stop = CancellationToken::new();
    let h = tokio::spawn(worker.run(stop.clone()));
    let blobs = store(t);
    let finished = async {
        while load_manifest(&blobs, backup_id).await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        _ = switch.crashed() => {}
        _ = finished => {}
        _ = tokio::time::sleep(Duration::from_secs(30)) => panic!("the worker neither crashed nor finished"),
    }
    h.abort();
    let _ = h.await;
    let step = switch
        .steps()
        .get(at)
        .cloned()
        .unwrap_or_else(|| "(after the last step)".into());
    (step, switch.steps().len())
}

/// Runs `run` (a fresh job whose one worker dies before the given step; returns its
/// location, id, that step and the steps taken) once to count the steps, then for each
/// sampled step, each time carried on by a fresh coordinator; every run must end
/// complete, exact (`sources`) and with an empty queue. Prints the matrix.
async fn assert_every_worker_crash_recovers<F, Fut>(
    run: F,
    env: &TestEnv,
    sources: &[(String, Vec<Entity>)],
) where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = (Location, String, String, usize)>,
{
    let (_, _, _, total) = run(usize::MAX).await;
    let mut matrix = Vec::new();
    for at in points(total + 1, sample_size()) {
        let (t, id, step, _) = run(at).await;
        let outcome = resume_and_check(&t, &id, env, sources).await;
        matrix.push(format!(
            "worker dies before step {at:>3} {step:<70} -> {outcome}"
        ));
    }
    println!("{}", matrix.join("\n"));
    assert!(
        matrix
            .iter()
            .all(|r| r.ends_with("complete, exact, queue empty")),
        "{}",
        matrix.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_any_step_loses_nothing() {
    let env = TestEnv::start().await;
    let client = tablevault_azure::table::TableClient::new(&env.account).unwrap();
    let table = unique_table("crashw");
    let source = load_numbered(&client, &table, 2, 20).await;
    let mut req = backup_of(&env.account, &table);
    req.split_keys = vec!["p001".into()];
    req.block_bytes = 64 * 1024;

    // One worker per run, dying before step `at`.
    let run = |at: usize| {
        let (env, req) = (&env, &req);
        async move {
            let t = target(&env.account);
            let job = plan(req, &t).await.unwrap();
            enqueue(&t, &job, None).await.unwrap();
            let (step, total) = worker_dies_before(at, &t, env, &job.backup_id).await;
            (t, job.backup_id, step, total)
        }
    };
    assert_every_worker_crash_recovers(run, &env, &[(table.clone(), source.clone())]).await;
}

/// A worker dies before each step of a group of tables (`TaskKind::Tables`): the first
/// table holds two pages, so the worker hands the other two on mid-scan; the group comes
/// back and becomes one task per unfinished table. Whatever the step, the backup ends
/// complete and exact with nothing left on the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_any_step_of_a_group_of_tables_loses_nothing() {
    a_worker_killed_at_any_step_of_a_group(1).await;
}

/// The same in backup format 2, where each small table's commit record carries its
/// data: its create is the table's only write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_any_step_of_a_group_of_inline_tables_loses_nothing() {
    a_worker_killed_at_any_step_of_a_group(2).await;
}

async fn a_worker_killed_at_any_step_of_a_group(format: u32) {
    use tablevault_core::protocol::{TaskMessage, WholeTable};
    use tablevault_core::store::BackupPaths;
    let env = TestEnv::start().await;
    let client = tablevault_azure::table::TableClient::new(&env.account).unwrap();
    let prefix = unique_table("crashg");
    let mut sources = Vec::new();
    for (i, (partitions, per)) in [(2, 750), (1, 20), (1, 20)].into_iter().enumerate() {
        let table = format!("{prefix}{i}");
        let entities = load_numbered(&client, &table, partitions, per).await;
        sources.push((table, entities));
    }
    let mut req = tablevault_coordinator::backup::BackupRequest::new(env.account.clone());
    req.tables = Some(sources.iter().map(|(t, _)| t.clone()).collect());
    req.format = format;

    let run = |at: usize| {
        let (env, req) = (&env, &req);
        async move {
            let t = target(&env.account);
            let job = plan(req, &t).await.unwrap();
            // The three tables in one message, as the coordinator groups many tables.
            t.create_queues().await.unwrap();
            let whole: Vec<WholeTable> = job
                .tables
                .iter()
                .map(|p| WholeTable {
                    table: p.name.clone(),
                    task: p.tasks[0].task.clone(),
                })
                .collect();
            let group = TaskMessage::for_tables(&t.container, &job.backup_id, &whole).unwrap();
            t.task_queue()
                .unwrap()
                .put(&group.encode(), None)
                .await
                .unwrap();
            store(&t)
                .mark(&BackupPaths::new(&job.backup_id).enqueued_marker(), "1")
                .await
                .unwrap();
            let (step, total) = worker_dies_before(at, &t, env, &job.backup_id).await;
            (t, job.backup_id, step, total)
        }
    };
    assert_every_worker_crash_recovers(run, &env, &sources).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_at_any_step_loses_nothing() {
    let env = TestEnv::start().await;
    let client = tablevault_azure::table::TableClient::new(&env.account).unwrap();
    let table = unique_table("crashc");
    let source = load_numbered(&client, &table, 2, 20).await;
    let mut req = backup_of(&env.account, &table);
    req.split_keys = vec!["p001".into()];

    let run = |at: usize| {
        let (env, req) = (&env, &req);
        async move {
            let t = target(&env.account);
            let switch = CrashSwitch::at(at);
            let mut crashing = t.clone();
            crashing.backends = Some(Backends {
                store: crashing_store(&t, &switch),
                queue: crashing_queue(&t, &t.queue, &switch),
                poison: crashing_queue(&t, &poison_queue_name(&t.queue), &switch),
            });
            let opts: WatchOptions = watch_opts(1, &env.account);
            let req = req.clone();
            let h = tokio::spawn(async move { run_backup(&req, &crashing, &opts).await });
            tokio::select! {
                _ = switch.crashed() => {}
                _ = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            let finished = h.is_finished();
            h.abort();
            let _ = h.await;
            let step = switch
                .steps()
                .get(at)
                .cloned()
                .unwrap_or_else(|| "(after the last step)".into());
            (t, step, switch.steps().len(), finished)
        }
    };
    let (_, _, total, finished) = run(usize::MAX).await;
    assert!(finished, "a run without a crash completes");
    let mut matrix = Vec::new();
    for at in points(total + 1, sample_size()) {
        let (t, step, _, _) = run(at).await;
        // The backup id, if the plan got written before the crash.
        let ids = store(&t).list_dirs("").await.unwrap_or_default();
        let outcome = match ids.first() {
            None => "nothing written: run the backup again".to_string(),
            Some(id) => resume_and_check(&t, id, &env, &[(table.clone(), source.clone())]).await,
        };
        matrix.push(format!(
            "coordinator dies before step {at:>3} {step:<60} -> {outcome}"
        ));
    }
    println!("{}", matrix.join("\n"));
    assert!(
        matrix
            .iter()
            .all(|r| r.ends_with("complete, exact, queue empty")
                || r.ends_with("run the backup again")),
        "{}",
        matrix.join("\n")
    );
}
