//! Operating workers: the metrics endpoint scraped during a backup and a restore adds up
//! to their reports, and a worker asked to stop drains (finishes within its grace period
//! or gives its task back) without losing anything.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use support::{Setup, backup_of, numbered, restore_renamed, store, watch_opts, worker_config};
use tablevault_coordinator::backup::{enqueue, plan, run_backup, watch};
use tablevault_coordinator::restore::run_restore;
use tablevault_core::store::BackupPaths;
use tablevault_tests::{http_get, scan_all, unique_table};
use tablevault_worker::metrics::WorkerMetrics;
use tablevault_worker::serve::{Health, serve};
use tablevault_worker::{Worker, WorkerStats};
use tokio_util::sync::CancellationToken;

/// GETs a path of the endpoint: status and body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_get(addr, path).await.expect("the endpoint answers")
}

/// The value of one sample (name with its labels, as exposed), 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The sum of every sample of a metric whose labels contain `with`.
fn sum(text: &str, metric: &str, with: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn scraped_metrics_add_up_to_the_backup_and_restore_reports() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("metrics", 6, 500).await;
    // One daemon-like worker with the endpoint; the coordinator runs no workers.
    let metrics = Arc::new(WorkerMetrics::new());
    let health = Arc::new(Health::default());
    let stop_serving = CancellationToken::new();
    let (addr, server) = serve(
        "127.0.0.1:0".parse().unwrap(),
        metrics.clone(),
        health.clone(),
        stop_serving.clone(),
    )
    .await
    .unwrap();
    assert_eq!(
        get(addr, "/readyz").await.0,
        503,
        "not ready before the queue"
    );
    let mut config = worker_config(&t, &env.account, Duration::from_secs(10));
    config.concurrency = 3;
    config.metrics = metrics.clone();
    config.health = health.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(config, Arc::new(WorkerStats::default())).unwrap();
    let running = tokio::spawn(worker.run(stop.clone()));

    // Scrape while the backup runs: some scrape sees a task in flight.
    let scraping = CancellationToken::new();
    let scraper = {
        let scraping = scraping.clone();
        tokio::spawn(async move {
            let mut busy_seen = false;
            while !scraping.is_cancelled() {
                let (status, text) = get(addr, "/metrics").await;
                assert_eq!(status, 200);
                busy_seen |= sum(&text, "tablevault_tasks_in_flight", "backup") > 0.0;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            busy_seen
        })
    };
    let mut req = backup_of(&env.account, &table);
    req.ranges_per_table = Some(3);
    let backup = run_backup(&req, &t, &watch_opts(0, &env.account))
        .await
        .unwrap();
    scraping.cancel();
    assert!(
        scraper.await.unwrap(),
        "a scrape saw the backup's tasks in flight"
    );
    assert_eq!(backup.status, "complete");
    assert_eq!(get(addr, "/readyz").await.0, 200);

    // The commit record is what completes the backup; the worker deletes the message
    // after it: wait for that.
    let mut text = get(addr, "/metrics").await.1;
    for _ in 0..200 {
        if sample(&text, "tablevault_tasks_in_flight{kind=\"backup\"}") == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        text = get(addr, "/metrics").await.1;
    }
    // Shown with --nocapture (the README's excerpt comes from here).
    println!("{text}");
    let kind = |name: &str, k: &str| sample(&text, &format!("{name}{{kind=\"{k}\"}}"));
    assert_eq!(
        kind("tablevault_tasks_committed_total", "backup"),
        backup.tasks_committed as f64,
        "{text}"
    );
    assert_eq!(
        kind("tablevault_committed_entities_total", "backup"),
        backup.entities as f64
    );
    assert_eq!(backup.entities, source.len() as u64);
    assert_eq!(
        kind("tablevault_committed_bytes_total", "backup"),
        backup.stored_bytes as f64
    );
    assert!(kind("tablevault_tasks_claimed_total", "backup") >= backup.tasks_committed as f64);
    assert_eq!(kind("tablevault_tasks_poisoned_total", "backup"), 0.0);
    assert_eq!(kind("tablevault_tasks_in_flight", "backup"), 0.0);
    assert!(sum(&text, "tablevault_requests_total", "service=\"table\"") > 0.0);
    assert!(sum(&text, "tablevault_requests_total", "service=\"blob\"") > 0.0);
    assert!(
        sum(
            &text,
            "tablevault_request_duration_seconds_count",
            "service=\"queue\""
        ) > 0.0
    );
    assert!(text.contains("tablevault_limiter_concurrency{endpoint="));

    // The restore, through the same worker.
    let restored = unique_table("metricsdst");
    let r = restore_renamed(&backup.backup_id, &env.account, &table, &restored);
    let report = run_restore(&r, &t, &watch_opts(0, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "complete", "{report:?}");
    let (_, text) = get(addr, "/metrics").await;
    assert_eq!(
        sample(
            &text,
            "tablevault_committed_entities_total{kind=\"restore\"}"
        ),
        report.written as f64
    );
    assert_eq!(scan_all(&client, &restored).await.len(), source.len());

    stop.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(
        get(addr, "/readyz").await.0,
        503,
        "a stopped worker is not ready"
    );
    stop_serving.cancel();
    server.await.unwrap();
}

/// One task, planned and enqueued, with a worker on it: returns when the task runs.
async fn one_task_in_flight(
    s: &Setup,
    grace: Duration,
) -> (
    tablevault_core::protocol::BackupJob,
    Arc<WorkerMetrics>,
    Arc<Health>,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), tablevault_azure::Error>>,
) {
    let mut req = backup_of(&s.env.account, &s.table);
    req.ranges_per_table = Some(1);
    req.dynamic_split = false;
    // Small blocks: the task takes a while and writes as it goes.
    req.block_bytes = 64 * 1024;
    req.blocks_per_blob = 1;
    let job = plan(&req, &s.t).await.unwrap();
    assert_eq!(job.task_count(), 1);
    enqueue(&s.t, &job, None).await.unwrap();
    let mut config = worker_config(&s.t, &s.env.account, Duration::from_secs(30));
    config.shutdown_grace = grace;
    let (metrics, health) = (config.metrics.clone(), config.health.clone());
    let stop = CancellationToken::new();
    let worker = Worker::new(config, Arc::new(WorkerStats::default())).unwrap();
    let running = tokio::spawn(worker.run(stop.clone()));
    let mut waited = 0;
    while !metrics
        .render()
        .contains("tablevault_tasks_in_flight{kind=\"backup\"} 1")
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
        waited += 1;
        assert!(waited < 4000, "the worker never started the task");
    }
    (job, metrics, health, stop, running)
}

#[tokio::test]
async fn a_stopping_worker_finishes_its_task_within_the_grace_period() {
    let s = numbered("drain", 4, 1500).await;
    let (job, metrics, health, stop, running) =
        one_task_in_flight(&s, Duration::from_secs(120)).await;
    stop.cancel();
    let mut waited = 0;
    while health.is_ready() {
        tokio::time::sleep(Duration::from_millis(1)).await;
        waited += 1;
        assert!(waited < 1000, "not ready as soon as it drains");
    }
    tokio::time::timeout(Duration::from_secs(120), running)
        .await
        .expect("drained within the grace period")
        .unwrap()
        .unwrap();
    let text = metrics.render();
    assert!(
        text.contains("tablevault_tasks_committed_total{kind=\"backup\"} 1"),
        "the task in flight was finished, not abandoned: {text}"
    );
    let commit = BackupPaths::new(&job.backup_id).commit(&s.table, "r0000");
    assert!(store(&s.t).exists(&commit).await.unwrap());
    // The coordinator finds nothing left to do.
    let report = watch(&s.t, job, &watch_opts(0, &s.env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "complete");
    assert_eq!(report.entities, s.source.len() as u64);
}

#[tokio::test]
async fn a_task_still_running_after_the_grace_period_is_given_back_whole() {
    let s = numbered("giveback", 4, 1500).await;
    let (job, metrics, _health, stop, running) = one_task_in_flight(&s, Duration::ZERO).await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("stopped at once")
        .unwrap()
        .unwrap();
    let text = metrics.render();
    assert_eq!(
        sample(&text, "tablevault_tasks_committed_total{kind=\"backup\"}"),
        0.0,
        "too little grace to finish: {text}"
    );
    assert_eq!(
        sample(&text, "tablevault_tasks_failed_total{kind=\"backup\"}"),
        0.0,
        "a shutdown is not the task's failure"
    );
    // The message is visible again at once, not after its lease lapses.
    assert!(
        s.t.task_queue().unwrap().has_waiting().await.unwrap(),
        "the task was given back"
    );
    let commit = BackupPaths::new(&job.backup_id).commit(&s.table, "r0000");
    assert!(!store(&s.t).exists(&commit).await.unwrap());
    // Another worker takes it over and the backup completes exactly.
    let report = watch(&s.t, job, &watch_opts(1, &s.env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "complete");
    assert_eq!(report.entities, s.source.len() as u64);
    assert_eq!(scan_all(&s.client, &s.table).await.len(), s.source.len());
}

/// Records every snapshot a progress display is shown, and the phases it is told of.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<tablevault_coordinator::Snapshot>>);

/// What a recorder saw: a phase started, or a snapshot.
#[derive(Debug, Clone)]
enum Seen {
    Phase(&'static str),
    Update(tablevault_coordinator::Snapshot),
}

#[derive(Default)]
struct PhaseRecorder(std::sync::Mutex<Vec<Seen>>);

impl tablevault_coordinator::Progress for PhaseRecorder {
    fn update(&self, s: tablevault_coordinator::Snapshot) {
        self.0.lock().unwrap().push(Seen::Update(s));
    }
    fn finish(&self) {}
    fn phase(&self, name: &'static str) {
        self.0.lock().unwrap().push(Seen::Phase(name));
    }
}

impl tablevault_coordinator::Progress for Recorder {
    fn update(&self, s: tablevault_coordinator::Snapshot) {
        self.0.lock().unwrap().push(s);
    }
    fn finish(&self) {}
}

#[tokio::test]
async fn verify_reports_progress_against_the_manifest() {
    let s = numbered("verifyprog", 4, 400).await;
    let mut req = backup_of(&s.env.account, &s.table);
    req.ranges_per_table = Some(2);
    let backup = run_backup(&req, &s.t, &watch_opts(2, &s.env.account))
        .await
        .unwrap();
    let recorder = Recorder::default();
    let report = tablevault_coordinator::verify::verify_with_progress(
        &s.t,
        &tablevault_coordinator::verify::VerifyRequest {
            backup_id: backup.backup_id.clone(),
            tables: None,
            renames: Vec::new(),
            against: None,
        },
        Some(&recorder),
    )
    .await
    .unwrap();
    assert_eq!(report.status, "ok");
    let seen = recorder.0.into_inner().unwrap();
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(
        seen.windows(2)
            .all(|w| w[0].entities <= w[1].entities && w[0].tasks_done <= w[1].tasks_done)
    );
    let last = seen.last().unwrap();
    assert_eq!(last.entities_expected, Some(s.source.len() as u64));
    assert_eq!(last.entities, s.source.len() as u64);
    assert_eq!(last.tasks_done, last.tasks_total);
    assert_eq!(last.tasks_total, backup.tasks_committed as u64);
}

#[tokio::test]
async fn a_restore_reports_percent_while_writing_and_while_reading_back() {
    let s = numbered("restoreprog", 4, 400).await;
    let mut req = backup_of(&s.env.account, &s.table);
    req.ranges_per_table = Some(2);
    let backup = run_backup(&req, &s.t, &watch_opts(2, &s.env.account))
        .await
        .unwrap();
    let recorder = Arc::new(PhaseRecorder::default());
    let mut opts = watch_opts(2, &s.env.account);
    opts.progress = Some(recorder.clone());
    let r = restore_renamed(
        &backup.backup_id,
        &s.env.account,
        &s.table,
        &unique_table("restoreprogdst"),
    );
    let report = run_restore(&r, &s.t, &opts).await.unwrap();
    assert_eq!(report.status, "complete", "{report:?}");
    let seen = recorder.0.lock().unwrap().clone();
    let n = s.source.len() as u64;
    let verify_at = seen
        .iter()
        .position(|e| matches!(e, Seen::Phase("verify")))
        .unwrap_or_else(|| panic!("a verify phase: {seen:?}"));
    let (writing, verifying) = seen.split_at(verify_at);
    let updates = |events: &[Seen]| -> Vec<tablevault_coordinator::Snapshot> {
        events
            .iter()
            .filter_map(|e| match e {
                Seen::Update(s) => Some(*s),
                Seen::Phase(_) => None,
            })
            .collect()
    };
    let (writing, verifying) = (updates(writing), updates(verifying));
    // Writing: sized from the manifest from the first snapshot on, never 0 of 0.
    assert!(
        writing
            .iter()
            .all(|u| u.entities_expected == Some(n) && u.tasks_total > 0),
        "{writing:?}"
    );
    let last = writing.last().unwrap();
    assert_eq!((last.entities, last.tasks_done), (n, last.tasks_total));
    // Reading back: every range, every entity.
    let last = verifying.last().unwrap();
    assert_eq!(last.entities_expected, Some(n));
    assert_eq!((last.entities, last.tasks_done), (n, last.tasks_total));
}
