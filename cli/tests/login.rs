//! `tablevault --auth-mode login` end to end: a backup and a restore with in-process
//! workers against Azurite's OAuth mode over HTTPS, every account given as keyless
//! endpoints, tokens from a fake Entra ID endpoint for a service principal (client
//! secret). One token per process serves the coordinator, the workers and all three
//! services.

mod support;

use std::process::Output;

use support::{command, text};

use tablevault_azure::table::TableClient;
use tablevault_dev::emulator::Azurite;
use tablevault_dev::sample::load_sample;
use tablevault_dev::tls::TestCertificate;
use tablevault_tests::fake_entra::{self, FakeEntra};
use tablevault_tests::{unique_lower, unique_table};

async fn tablevault(args: &[&str], env: &[(&str, &str)]) -> Output {
    tokio::process::Command::from(command(args, env))
        .output()
        .await
        .expect("run tablevault")
}

#[tokio::test]
async fn backup_and_restore_with_entra_id_login() {
    let cert = TestCertificate::shared();
    tablevault_azure::pipeline::trust_ca_certificate(cert.ca_pem.as_bytes()).unwrap();
    let azurite = Azurite::start_oauth().await.unwrap();
    let entra = FakeEntra::start().await;
    // Test data goes in with the emulator's key (Shared Key still works in OAuth mode).
    let client = TableClient::new(&azurite.account()).unwrap();
    let table = unique_table("login");
    load_sample(&client, &table, 300, 3, 4).await.unwrap();
    let container = unique_lower("c");

    let endpoints = azurite.endpoints();
    let ca = cert.ca_path.to_string_lossy().into_owned();
    let env = [
        ("TABLEVAULT_AUTH_MODE", "login"),
        ("TABLEVAULT_IDENTITY", "client-secret"),
        ("AZURE_TENANT_ID", fake_entra::TENANT),
        ("AZURE_CLIENT_ID", fake_entra::CLIENT_ID),
        ("AZURE_CLIENT_SECRET", fake_entra::SECRET),
        ("AZURE_AUTHORITY_HOST", entra.authority.as_str()),
        ("TABLEVAULT_CA_CERT", ca.as_str()),
        // Keyless: the fallback for the source, backup and target accounts.
        ("AZURE_STORAGE_CONNECTION_STRING", endpoints.as_str()),
    ];

    let o = tablevault(
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
        &env,
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["status"], "complete", "{report}");
    assert_eq!(report["tables"][0]["entities"], 300);
    let id = report["backup_id"].as_str().unwrap().to_string();
    assert_eq!(
        entra.requests(),
        1,
        "one token for the whole backup process"
    );

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
        &env,
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let restore: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (restore["status"].as_str(), restore["written"].as_u64()),
        (Some("complete"), Some(300)),
        "{restore}"
    );
    assert_eq!(
        entra.requests(),
        2,
        "one token for the whole restore process"
    );
    let t = text(&o);
    assert!(!t.contains(fake_entra::SECRET) && !t.contains("eyJ"), "{t}");

    // The wrong secret: the failure names the identity, never the secret.
    let mut bad = env;
    bad[4] = ("AZURE_CLIENT_SECRET", "not-the-secret-value");
    let o = tablevault(&["list", "--container", &container, "--json"], &bad).await;
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains(fake_entra::CLIENT_ID), "{t}");
    assert!(!t.contains("not-the-secret-value"), "{t}");
}

#[tokio::test]
async fn auth_settings_follow_the_azure_cli_conventions() {
    // Key mode: AZURE_STORAGE_ACCOUNT needs AZURE_STORAGE_KEY (or a SAS).
    let o = tablevault(&["list"], &[("AZURE_STORAGE_ACCOUNT", "acct")]).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("neither AZURE_STORAGE_KEY"),
        "{}",
        text(&o)
    );
    // An account URL needs login...
    let url = "https://acct.blob.core.windows.net";
    let o = tablevault(&["list", "--backup", url], &[]).await;
    assert!(text(&o).contains("needs --auth-mode login"), "{}", text(&o));
    // ...which AZURE_STORAGE_AUTH_MODE also selects; then the identity must be complete.
    let o = tablevault(
        &["list", "--backup", url, "--identity", "client-secret"],
        &[
            ("AZURE_STORAGE_AUTH_MODE", "login"),
            ("AZURE_CLIENT_SECRET", "s3cr3t-value"),
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("client-secret needs AZURE_"),
        "{}",
        text(&o)
    );
    assert!(!text(&o).contains("s3cr3t-value"), "{}", text(&o));
    let o = tablevault(&["--auth-mode", "oauth", "list"], &[]).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("expected key or login"), "{}", text(&o));
    // A bad value is reported under the variable it came from (it was named
    // TABLEVAULT_AUTH_MODE).
    let o = tablevault(&["list"], &[("AZURE_STORAGE_AUTH_MODE", "bogus")]).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("AZURE_STORAGE_AUTH_MODE: unknown auth mode"),
        "{}",
        text(&o)
    );
}
