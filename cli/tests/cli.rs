//! The `tablevault` binary as a user runs it: help, exit codes, `--json`, environment
//! fallbacks, and secrets kept out of its output.

use std::process::{Command, Output};

use tablevault_azure::table::TableClient;
use tablevault_dev::sample::load_sample;
use tablevault_tests::{TestEnv, unique_lower, unique_table};

fn tablevault(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablevault"));
    cmd.args(args)
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .env_remove("TABLEVAULT_SOURCE")
        .env_remove("TABLEVAULT_BACKUP")
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tablevault")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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

    let o = tablevault(
        &["list", "--container", &container],
        &[("TABLEVAULT_BACKUP", &conn)],
    );
    assert!(text(&o).contains(&id));

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
    assert!(text(&o).contains("not found"), "{}", text(&o));
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
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablevault"));
    cmd.args(args)
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("run tablevault")
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
