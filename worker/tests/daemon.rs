//! The `tablevault-worker` binary as Kubernetes runs it: it serves its health and metrics
//! endpoint, and on SIGTERM turns unready at once, finishes the task it holds within its
//! grace period, and exits 0.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tablevault_azure::table::TableClient;
use tablevault_coordinator::Location;
use tablevault_coordinator::backup::{BackupRequest, enqueue, plan};
use tablevault_core::store::BackupPaths;
use tablevault_tests::{
    TestEnv, http_get, load_numbered, refusing_address, unique_lower, unique_table,
};

/// GETs a path of the worker's endpoint: the status and the body, or `None` when
/// nothing answers.
async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get(([127, 0, 0, 1], port).into(), path).await
}

/// Waits until `check` holds, polling, for at most `limit`.
async fn wait_for<F: AsyncFnMut() -> bool>(what: &str, limit: Duration, mut check: F) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Starts the worker with its endpoint on a port the OS picks (a port chosen by the test
/// and freed could be taken by a test running alongside before the worker binds it) and
/// returns it with that port, read from the worker's JSON log line that names the
/// address. Every stderr line is passed on to the test's stderr.
fn spawn_worker(conn: &str, queue: &str) -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tablevault-worker"))
        .args([
            "--concurrency",
            "1",
            "--queue",
            queue,
            "--metrics-addr",
            "127.0.0.1:0",
            "--shutdown-grace",
            "120",
            "--log-format",
            "json",
        ])
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .env_remove("TABLEVAULT_AUTH_MODE")
        .env("TABLEVAULT_BACKUP", conn)
        .env("TABLEVAULT_SOURCE", conn)
        .env("RUST_LOG", "warn,tablevault_worker::serve=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tablevault-worker");
    let stderr = child.stderr.take().expect("piped");
    let (bound, port) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            let addr = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|v| v["fields"]["addr"].as_str().map(str::to_string));
            if let Some(port) = addr.and_then(|a| a.rsplit_once(':')?.1.parse::<u16>().ok()) {
                let _ = bound.send(port);
            }
        }
    });
    let port = port
        .recv_timeout(Duration::from_secs(60))
        .expect("the worker logs the address of its endpoint");
    (child, port)
}

#[tokio::test]
async fn sigterm_drains_the_task_in_hand_and_exits_0() {
    let env = TestEnv::start().await;
    let conn = env.connection_string();
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("daemon");
    let source = load_numbered(&client, &table, 4, 1500).await;
    let location = Location {
        account: env.account.clone(),
        container: unique_lower("bk"),
        queue: unique_lower("tasks"),
        client_options: Default::default(),
        backends: None,
    };
    let (mut worker, port) = spawn_worker(&conn, &location.queue);
    wait_for("readiness", Duration::from_secs(60), async || {
        matches!(get(port, "/readyz").await, Some((200, _)))
    })
    .await;
    assert_eq!(get(port, "/healthz").await.map(|r| r.0), Some(200));

    // One task that takes a while: small blocks, no splitting.
    let mut req = BackupRequest::new(env.account.clone());
    req.tables = Some(vec![table.clone()]);
    req.ranges_per_table = Some(1);
    req.dynamic_split = false;
    req.block_bytes = 64 * 1024;
    req.blocks_per_blob = 1;
    let job = plan(&req, &location).await.unwrap();
    enqueue(&location, &job, None).await.unwrap();
    wait_for("the task to start", Duration::from_secs(60), async || {
        get(port, "/metrics")
            .await
            .is_some_and(|(_, m)| m.contains("tablevault_tasks_in_flight{kind=\"backup\"} 1"))
    })
    .await;

    // SIGTERM: unready at once, the task finished, exit 0.
    // SAFETY: kill(2) on a child process we started and have not reaped.
    assert_eq!(unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) }, 0);
    wait_for("readiness to drop", Duration::from_secs(5), async || {
        match get(port, "/readyz").await {
            Some((status, body)) => status == 503 && body.ends_with("draining\n"),
            None => true, // already gone
        }
    })
    .await;
    let started = Instant::now();
    let status = loop {
        if let Some(s) = worker.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the worker did not exit within its grace period"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(0), "a drained worker exits 0");
    let store = location.store().unwrap();
    let commit = BackupPaths::new(&job.backup_id).commit(&table, "r0000");
    assert!(
        store.exists(&commit).await.unwrap(),
        "the task in hand was finished, not dropped"
    );
    let record = store.commit_record(&commit).await.unwrap();
    assert_eq!(record.entities, source.len() as u64);
}

/// Regression: a worker that could not reach storage at start-up ignored SIGTERM and
/// retried creating its queues for some 85 s, then exited 1. It now stops at once.
#[tokio::test]
async fn sigterm_while_storage_is_unreachable_at_start_exits_0_at_once() {
    // Every request is refused.
    let (_refusing, refused) = refusing_address();
    let dead = format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};\
         BlobEndpoint=http://127.0.0.1:{p}/devstoreaccount1;\
         QueueEndpoint=http://127.0.0.1:{p}/devstoreaccount1;\
         TableEndpoint=http://127.0.0.1:{p}/devstoreaccount1",
        tablevault_azure::config::EMULATOR_KEY,
        p = refused.port()
    );
    let (mut worker, port) = spawn_worker(&dead, "tasks");
    wait_for("the endpoint", Duration::from_secs(30), async || {
        get(port, "/healthz").await.is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SAFETY: kill(2) on a child process we started and have not reaped.
    assert_eq!(unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) }, 0);
    let started = Instant::now();
    let status = loop {
        if let Some(s) = worker.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = worker.kill();
            panic!("the worker did not stop within 10 s of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(0));
}

/// Regression: the daemon refused `--visibility-timeout` values under 10 s that the
/// coordinator's in-process workers take (5 s up), so a pool started with the value the
/// coordinator was given exited at start while the coordinator waited for it.
#[test]
fn the_visibility_timeout_has_the_coordinators_bounds() {
    use tablevault_worker::lease::{MAX_VISIBILITY_SECONDS, MIN_VISIBILITY_SECONDS};
    let run = |seconds: u64| {
        Command::new(env!("CARGO_BIN_EXE_tablevault-worker"))
            .args(["--visibility-timeout", &seconds.to_string()])
            .env_remove("AZURE_STORAGE_CONNECTION_STRING")
            .env_remove("AZURE_STORAGE_ACCOUNT")
            .env_remove("TABLEVAULT_BACKUP")
            .env_remove("TABLEVAULT_SOURCE")
            .env_remove("TABLEVAULT_TARGET")
            .output()
            .unwrap()
    };
    let bounds = format!("{MIN_VISIBILITY_SECONDS}..={MAX_VISIBILITY_SECONDS}");
    let refused = run(MIN_VISIBILITY_SECONDS - 1);
    let text = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{text}");
    assert!(text.contains(&bounds), "{text}");
    // The least value passes the command line (and stops at the missing account).
    let taken = run(MIN_VISIBILITY_SECONDS);
    let text = String::from_utf8_lossy(&taken.stderr);
    assert!(!text.contains("--visibility-timeout"), "{text}");
    assert_eq!(
        MIN_VISIBILITY_SECONDS, 5,
        "the coordinator's documented least value"
    );
}
