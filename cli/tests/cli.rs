//! The `tablevault` binary as a user runs it: help, exit codes, `--json`, environment
//! fallbacks, and secrets kept out of its output.

mod support;

use std::process::{Command, Output};

use support::{command, text};
use tablevault_azure::table::TableClient;
use tablevault_dev::sample::load_sample;
use tablevault_tests::{TestEnv, unique_lower, unique_table};

fn tablevault(args: &[&str], env: &[(&str, &str)]) -> Output {
    command(args, env).output().expect("run tablevault")
}

#[test]
fn help_explains_commands_and_exit_codes() {
    let o = tablevault(&["--help"], &[]);
    assert!(o.status.success());
    let t = text(&o);
    for word in [
        "backup",
        "status",
        "list",
        "demo",
        "Exit codes",
        "AZURE_STORAGE_CONNECTION_STRING",
    ] {
        assert!(t.contains(word), "--help mentions {word}: {t}");
    }
    let o = tablevault(
        &["backup", "--help"],
        &[("TABLEVAULT_SOURCE", "AccountName=a;AccountKey=c2VjcmV0")],
    );
    let t = text(&o);
    assert!(t.contains("--split-keys") && t.contains("--workers") && t.contains("--compression"));
    assert!(t.contains("--format") && t.contains("commit record"), "{t}");
    assert!(
        !t.contains("c2VjcmV0"),
        "--help never shows environment values"
    );
}

#[test]
fn configuration_errors_exit_2_and_never_echo_the_key() {
    let o = tablevault(&["backup", "--json"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no source account"), "{}", text(&o));

    let o = tablevault(
        &[
            "backup",
            "--source",
            "AccountName=a;AcountKey=c2VjcmV0X2tleQ==",
            "--backup",
            "UseDevelopmentStorage=true",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(t.contains("unknown key \"AcountKey\""), "{t}");
    assert!(!t.contains("c2VjcmV0X2tleQ"), "{t}");

    let o = tablevault(&["backup", "--compression", "lz4"], &[]);
    assert_eq!(o.status.code(), Some(2));
    // Backup format versions this build writes: 1 and 2.
    for format in ["0", "3"] {
        let o = tablevault(&["backup", "--format", format], &[]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("1..=2"), "{}", text(&o));
    }
    // The same bounds as the worker daemon's (`the_visibility_timeout_has_the_coordinators_bounds`).
    let o = tablevault(&["backup", "--visibility-timeout", "4"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("5..=3600"), "{}", text(&o));
    let o = tablevault(
        &[
            "status",
            "not/an/id",
            "--backup",
            "UseDevelopmentStorage=true",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// A script that asked for `--json` gets a JSON object on stdout for a refused command
/// line too; with `--log-format json` every stderr line is JSON, the last error too.
#[test]
fn usage_errors_and_failures_keep_the_output_formats_asked_for() {
    let o = tablevault(&["list", "--json", "--no-such-flag"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["exit_code"], 2, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("--no-such-flag"),
        "{v}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("Usage"));

    // A message whose first line ends in a colon names the arguments after it.
    let o = tablevault(&["forget", "--json"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert!(v["error"].as_str().unwrap().contains("<ID"), "{v}");

    let o = tablevault(&["list", "--no-such-flag"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty(), "{}", text(&o));
    let o = tablevault(&["list", "--json", "--help"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage"));

    let o = tablevault(
        &[
            "list",
            "--log-format",
            "json",
            "--backup",
            "AccountName=a;AcountKey=c2VjcmV0X2tleQ==",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(!lines.is_empty());
    for line in &lines {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    }
    let last: serde_json::Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(last["level"], "ERROR");
    assert!(
        last["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("AcountKey")
    );
    assert!(!stderr.contains("c2VjcmV0X2tleQ"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn backup_status_and_list_with_json_output() {
    let env = TestEnv::start().await;
    let conn = env.connection_string();
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("cli");
    load_sample(&client, &table, 700, 7, 4).await.unwrap();
    let container = unique_lower("c");

    // The source and backup accounts come from the fallback variable.
    let o = tokio::task::spawn_blocking({
        let (conn, table, container) = (conn.clone(), table.clone(), container.clone());
        move || {
            tablevault(
                &[
                    "backup",
                    "--tables",
                    &table,
                    "--container",
                    &container,
                    "--workers",
                    "2",
                    "--json",
                ],
                &[("AZURE_STORAGE_CONNECTION_STRING", &conn)],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON object");
    assert_eq!(report["status"], "complete");
    assert_eq!(report["tables"][0]["name"], table.as_str());
    assert_eq!(report["tables"][0]["entities"], 700);
    let id = report["backup_id"].as_str().unwrap().to_string();
    assert!(!text(&o).contains("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq"));

    let o = tablevault(
        &["status", &id, "--container", &container, "--json"],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (status["status"].as_str(), status["entities"].as_u64()),
        (Some("complete"), Some(700))
    );

    let o = tablevault(
        &["list", "--container", &container, "--json"],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list["backups"][0]["backup_id"], id.as_str());
    assert_eq!(list["backups"][0]["entities"], 700);

    assert!(list["backups"][0]["stored_bytes"].as_u64().unwrap() > 0);
    // Times are recorded to the second: a quick backup can take "0 s".
    assert!(list["backups"][0]["duration_seconds"].as_f64().unwrap() >= 0.0);

    let o = tablevault(
        &["list", "--container", &container],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    let t = text(&o);
    assert!(t.contains(&id));
    for column in [
        "ID", "STARTED", "STATE", "TABLES", "ENTITIES", "SIZE", "DURATION",
    ] {
        assert!(t.lines().next().unwrap().contains(column), "{t}");
    }

    // Retention: no rule is a usage error; the newest complete backup always stays.
    let o = tablevault(
        &["prune", "--container", &container],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = tablevault(
        &[
            "prune",
            "--keep-last",
            "1",
            "--dry-run",
            "--container",
            &container,
            "--json",
        ],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let pruned: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(pruned["kept"][0]["id"], id.as_str(), "{pruned}");
    assert_eq!(pruned["removed"].as_array().unwrap().len(), 0);
    let o = tablevault(
        &["forget", &id, "--container", &container],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("newest complete"), "{}", text(&o));

    // A table that does not exist is a usage error, reported in JSON too.
    let o = tablevault(
        &[
            "backup",
            "--tables",
            "NoSuchTable",
            "--container",
            &container,
            "--json",
        ],
        &[("TABLEVAULT_SOURCE", &conn), ("TABLEVAULT_BACKUP", &conn)],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(err["error"].as_str().unwrap().contains("NoSuchTable"));

    // Restore into a renamed table, then verify against it: both succeed...
    let renamed = format!("{table}r");
    let o = tablevault(
        &[
            "restore",
            &id,
            "--container",
            &container,
            "--rename",
            &format!("{table}={renamed}"),
            "--workers",
            "2",
            "--json",
        ],
        &[("TABLEVAULT_BACKUP", &conn), ("TABLEVAULT_TARGET", &conn)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let restore: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (restore["status"].as_str(), restore["written"].as_u64()),
        (Some("complete"), Some(700))
    );
    assert_eq!(restore["tables"][0]["target"], renamed.as_str());
    let verify_args = [
        "verify",
        &id,
        "--container",
        &container,
        "--rename",
        &format!("{table}={renamed}"),
        "--json",
    ];
    let o = tablevault(
        &verify_args,
        &[("TABLEVAULT_BACKUP", &conn), ("TABLEVAULT_AGAINST", &conn)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // ...and a difference in the live table is exit code 4.
    client
        .delete_entity(&renamed, "customer-00003", "order-0000000003")
        .await
        .unwrap();
    let o = tablevault(
        &verify_args,
        &[("TABLEVAULT_BACKUP", &conn), ("TABLEVAULT_AGAINST", &conn)],
    );
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tables"][0]["missing_in_live"], 1);

    // An unknown backup id is a usage error naming the container.
    let o = tablevault(
        &[
            "status",
            "20200101T000000Z-00000000",
            "--container",
            &container,
        ],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no backup or restore"), "{}", text(&o));
}

/// A reader that stops early (`tablevault list --json | head -1`) ends the command
/// quietly with exit code 141. Rust ignores SIGPIPE, and the first print to the closed
/// pipe panicked with a backtrace (exit code 101).
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_output_ends_the_command_without_a_panic() {
    let env = TestEnv::start().await;
    let conn = env.connection_string();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = tokio::task::spawn_blocking(move || {
        command(
            &["list", "--json", "--container", &unique_lower("c")],
            &[("TABLEVAULT_BACKUP", &conn)],
        )
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}

/// A closed stderr (`tablevault … 2>&1 | head -1`) loses the logs but not the command:
/// the log writer reported its failed writes with `eprintln!` to the same stderr, which
/// panicked (exit 101). Against a dead endpoint the command fails as it would with
/// stderr open (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_stderr_ends_the_command_without_a_panic() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let conn = conn_at("http://127.0.0.1:1/devstoreaccount1");
    let out = tokio::task::spawn_blocking(move || {
        command(
            &["list", "-vv", "--deadline", "2"],
            &[("TABLEVAULT_BACKUP", &conn)],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(writer)
        .output()
        .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// A connection string whose every endpoint is `endpoint`.
fn conn_at(endpoint: &str) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};\
         BlobEndpoint={endpoint};QueueEndpoint={endpoint};TableEndpoint={endpoint}",
        tablevault_azure::config::EMULATOR_KEY
    )
}

fn spawn_tablevault(args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    command(args, env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tablevault")
}

fn signal(child: &std::process::Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// Waits for the child, at most `limit`; returns its exit code and how long it took.
fn wait_at_most(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> (Option<i32>, std::time::Duration, String) {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (status.code(), started.elapsed(), text(&out));
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_stops_a_command_stuck_on_a_hung_endpoint_within_two_seconds() {
    use tablevault_tests::mock_server::{MockServer, Reply};
    let server = MockServer::start(vec![Reply::Stall; 50]).await;
    let conn = conn_at(&server.endpoint());
    let child = spawn_tablevault(
        &["backup", "--json"],
        &[("TABLEVAULT_SOURCE", &conn), ("TABLEVAULT_BACKUP", &conn)],
    );
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    signal(&child, "-INT");
    let (code, took, out) = wait_at_most(child, std::time::Duration::from_secs(5));
    assert_eq!(code, Some(130), "{out}");
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_endpoint_fails_within_the_deadline_naming_the_host() {
    use tablevault_tests::mock_server::{MockServer, Reply};
    let server = MockServer::start(vec![Reply::Stall; 50]).await;
    let conn = conn_at(&server.endpoint());
    let child = spawn_tablevault(
        &["list", "--deadline", "2"],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    let (code, took, out) = wait_at_most(child, std::time::Duration::from_secs(10));
    assert_eq!(code, Some(1), "{out}");
    assert!(took < std::time::Duration::from_secs(4), "{took:?}");
    let host = server.endpoint().split('/').nth(2).unwrap().to_string();
    assert!(out.contains(&host) && out.contains("List Blobs"), "{out}");
}

async fn count(client: &TableClient, table: &str) -> usize {
    tablevault_tests::scan_all(client, table).await.len()
}

fn parse(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {}", text(o)))
}

/// Restore A is stopped (Ctrl-C, or killed outright), then restore B of the same backup
/// runs to another table: A's table must not change while B runs (B's workers leave A's
/// tasks alone), B must be exact, and A must resume to exact.
async fn interrupted_restore_stays_stopped(sig: &str) {
    let env = TestEnv::start().await;
    let conn = env.connection_string();
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("src");
    load_sample(&client, &table, 8_000, 16, 4).await.unwrap();
    let source = tablevault_tests::scan_all(&client, &table).await;
    let container = unique_lower("c");
    let vars = [
        ("TABLEVAULT_SOURCE", conn.as_str()),
        ("TABLEVAULT_BACKUP", conn.as_str()),
        ("TABLEVAULT_TARGET", conn.as_str()),
    ];
    let o = tablevault(
        &[
            "backup",
            "--tables",
            &table,
            "--container",
            &container,
            "--block-size",
            "65536",
            "--blocks-per-blob",
            "1",
            "--json",
        ],
        &vars,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let backup = parse(&o)["backup_id"].as_str().unwrap().to_string();

    let (ta, tb) = (unique_table("ta"), unique_table("tb"));
    let restore_into = |target: &str| {
        vec![
            "restore".to_string(),
            backup.clone(),
            "--container".into(),
            container.clone(),
            "--rename".into(),
            format!("{table}={target}"),
            "--per-blob-max-bytes".into(),
            "0".into(),
            "--yes".into(),
            "--json".into(),
        ]
    };
    let args_a = restore_into(&ta);
    let args_a: Vec<&str> = args_a.iter().map(String::as_str).collect();
    let mut a_args = args_a.clone();
    a_args.extend(["--workers", "1"]);
    let child = spawn_tablevault(&a_args, &vars);
    // Stop A once it has written something, well before it is done.
    let started = std::time::Instant::now();
    while !client.table_exists(&ta).await.unwrap() || count(&client, &ta).await == 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "A never wrote"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    signal(&child, sig);
    let (code, _, out) = wait_at_most(child, std::time::Duration::from_secs(10));
    if sig == "-INT" {
        assert_eq!(code, Some(130), "{out}");
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let a_stopped_at = count(&client, &ta).await;
    assert!(
        a_stopped_at < source.len(),
        "A finished before it was stopped"
    );

    let o = tablevault(
        &restore_into(&tb)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &vars,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let b = parse(&o);
    assert_eq!(b["status"], "complete");
    assert_eq!(b["verification"]["ok"], true, "{b}");
    assert_eq!(b["target_account"], "devstoreaccount1");
    let restored_b = tablevault_tests::scan_all(&client, &tb).await;
    assert_eq!(restored_b.len(), source.len());
    assert!(restored_b.iter().zip(&source).all(|(x, y)| x.same_data(y)));
    assert_eq!(
        count(&client, &ta).await,
        a_stopped_at,
        "restore A's table changed while restore B ran"
    );

    // A is listed with its state, and resumes to exact.
    let o = tablevault(&["list", "--container", &container, "--json"], &vars);
    let listed = parse(&o);
    let a = listed["restores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tables"][0].as_str().unwrap().ends_with(&ta))
        .expect("restore A is listed")
        .clone();
    let expected = if sig == "-INT" {
        "interrupted"
    } else {
        "in-progress"
    };
    assert_eq!(a["status"], expected, "{listed}");
    let a_id = a["restore_id"].as_str().unwrap();
    let o = tablevault(
        &["status", a_id, "--container", &container, "--json"],
        &vars,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(parse(&o)["status"], expected);

    let o = tablevault(
        &["resume", a_id, "--container", &container, "--json"],
        &vars,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let resumed = parse(&o);
    assert_eq!(resumed["status"], "complete", "{resumed}");
    assert_eq!(resumed["verification"]["ok"], true);
    let restored_a = tablevault_tests::scan_all(&client, &ta).await;
    assert_eq!(restored_a.len(), source.len());
    assert!(restored_a.iter().zip(&source).all(|(x, y)| x.same_data(y)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_stopped_by_ctrl_c_stays_stopped_and_resumes() {
    interrupted_restore_stays_stopped("-INT").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_restore_stays_stopped_and_resumes() {
    interrupted_restore_stays_stopped("-KILL").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn restore_safety_dry_run_confirmation_cancel_and_bad_ids() {
    let env = TestEnv::start().await;
    let conn = env.connection_string();
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("src");
    load_sample(&client, &table, 300, 3, 2).await.unwrap();
    let container = unique_lower("c");
    let vars = [
        ("TABLEVAULT_SOURCE", conn.as_str()),
        ("TABLEVAULT_BACKUP", conn.as_str()),
        ("TABLEVAULT_TARGET", conn.as_str()),
    ];
    let o = tablevault(
        &[
            "backup",
            "--tables",
            &table,
            "--container",
            &container,
            "--json",
        ],
        &vars,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let backup = parse(&o)["backup_id"].as_str().unwrap().to_string();
    // The live table drifted: one entity more than the backup.
    client
        .insert_entity(&table, &tablevault_azure::table::Entity::new("zz", "extra"))
        .await
        .unwrap();

    // Dry run of replace: shows the target and the delete count, writes nothing.
    let o = tablevault(
        &[
            "restore",
            &backup,
            "--container",
            &container,
            "--mode",
            "replace",
            "--dry-run",
            "--json",
        ],
        &vars,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plan = parse(&o);
    assert_eq!(plan["target_account"], "devstoreaccount1");
    assert_eq!(plan["mode"], "replace");
    assert_eq!(plan["tables"][0]["would_delete"], 1, "{plan}");
    assert_eq!(plan["tables"][0]["unchanged"], 300);
    assert_eq!(plan["entities"], 300);
    assert_eq!(
        count(&client, &table).await,
        301,
        "a dry run changes nothing"
    );
    let o = tablevault(
        &["restore", &backup, "--container", &container, "--dry-run"],
        &vars,
    );
    assert!(text(&o).contains("devstoreaccount1"), "{}", text(&o));

    // Into a table that holds entities, without a terminal: refused unless --yes.
    let o = tablevault(
        &[
            "restore",
            &backup,
            "--container",
            &container,
            "--mode",
            "replace",
        ],
        &vars,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--yes"), "{}", text(&o));
    assert_eq!(count(&client, &table).await, 301);
    let o = tablevault(
        &[
            "restore",
            &backup,
            "--container",
            &container,
            "--mode",
            "replace",
            "--yes",
            "--json",
        ],
        &vars,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = parse(&o);
    assert_eq!(
        (r["status"].as_str(), r["deleted"].as_u64()),
        (Some("complete"), Some(1))
    );
    assert_eq!(count(&client, &table).await, 300);
    let rid = r["restore_id"].as_str().unwrap().to_string();

    // A finished restore cannot be cancelled or resumed into another account.
    let o = tablevault(&["cancel", &rid, "--container", &container], &vars);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Unknown ids say so.
    let o = tablevault(
        &["status", "20990101T000000Z-0000", "--container", &container],
        &vars,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no backup or restore"), "{}", text(&o));
    let o = tablevault(&["resume", "nonsense!", "--container", &container], &vars);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
