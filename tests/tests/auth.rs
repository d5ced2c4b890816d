//! Authentication schemes end to end against Azurite: Shared Key Lite for Table, and an
//! account SAS (generated here the way the portal does) for all three services.

use bytes::Bytes;
use tablevault_azure::ClientOptions;
use tablevault_azure::blob::BlobClient;
use tablevault_azure::config::{EMULATOR_ACCOUNT, EMULATOR_KEY, StorageAccount};
use tablevault_azure::credential::{SharedKeyCredential, TableAuthScheme};
use tablevault_azure::queue::{MessageTtl, QueueClient};
use tablevault_azure::table::{EdmValue, Entity, TableClient};
use tablevault_tests::{TestEnv, load_numbered, unique_lower, unique_table};

mod support;

#[tokio::test]
async fn shared_key_lite_works_for_tables() {
    let env = TestEnv::start().await;
    let opts = ClientOptions {
        table_auth: TableAuthScheme::SharedKeyLite,
        ..ClientOptions::default()
    };
    let t = TableClient::with_options(&env.account, &opts).unwrap();
    let name = unique_table("lite");
    t.create_table(&name).await.unwrap();
    t.insert_entity(&name, &Entity::new("p", "r").with("V", EdmValue::Int32(1)))
        .await
        .unwrap();
    assert!(t.get_entity(&name, "p", "r").await.unwrap().is_some());
}

/// A SAS parameter's value percent-encoded, as the portal gives it.
fn enc(s: &str) -> String {
    s.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
        .replace(':', "%3A")
        .replace(',', "%2C")
}

/// An account SAS (version 2020-12-06 layout): `account\nsp\nss\nsrt\nst\nse\nsip\nspr\nsv\nses\n`.
fn account_sas() -> String {
    let (sp, ss, srt, se, spr, sv) = (
        "rwdlacup",
        "bqt",
        "sco",
        "2099-01-01T00:00:00Z",
        "https,http",
        "2022-11-02",
    );
    let sts = format!("{EMULATOR_ACCOUNT}\n{sp}\n{ss}\n{srt}\n\n{se}\n\n{spr}\n{sv}\n\n");
    let sig = SharedKeyCredential::from_base64(EMULATOR_ACCOUNT, EMULATOR_KEY)
        .unwrap()
        .sign(&sts);
    format!(
        "sv={sv}&ss={ss}&srt={srt}&sp={sp}&se={}&spr={}&sig={}",
        enc(se),
        enc(spr),
        enc(&sig)
    )
}

#[tokio::test]
async fn account_sas_works_for_all_three_services() {
    let env = TestEnv::start().await;
    let plain = env.connection_string();
    // Same endpoints, SAS instead of the key.
    let endpoints: String = plain
        .split(';')
        .filter(|p| p.ends_with("Endpoint") || p.contains("Endpoint="))
        .map(|p| format!("{p};"))
        .collect();
    let sas_account = StorageAccount::from_connection_string(&format!(
        "{endpoints}SharedAccessSignature={}",
        account_sas()
    ))
    .unwrap();

    // The same SAS pasted decoded (its sig's `+`, `/` and `=` as base64 writes them):
    // they are encoded before it is sent, as a query would otherwise read `+` as a space.
    let decoded = percent_encoding::percent_decode_str(&account_sas())
        .decode_utf8()
        .unwrap()
        .into_owned();
    assert!(decoded.contains(['+', '/']), "{decoded}");
    let pasted_decoded = StorageAccount::from_connection_string(&format!(
        "{endpoints}SharedAccessSignature={decoded}"
    ))
    .unwrap();
    TableClient::new(&pasted_decoded)
        .unwrap()
        .list_tables()
        .await
        .unwrap();

    let t = TableClient::new(&sas_account).unwrap();
    let name = unique_table("sas");
    t.create_table(&name).await.unwrap();
    t.insert_entity(&name, &Entity::new("p", "r"))
        .await
        .unwrap();
    assert_eq!(
        t.query_page(&name, &Default::default(), None)
            .await
            .unwrap()
            .entities
            .len(),
        1
    );

    let q = QueueClient::new(&sas_account, &unique_lower("q")).unwrap();
    q.create().await.unwrap();
    q.put_message("m", None, MessageTtl::Never).await.unwrap();
    assert_eq!(
        q.get_messages(1, std::time::Duration::from_secs(5))
            .await
            .unwrap()
            .len(),
        1
    );

    let c = BlobClient::new(&sas_account, &unique_lower("c")).unwrap();
    c.create_container().await.unwrap();
    c.put_block("b", "00000000", Bytes::from_static(b"abc"))
        .await
        .unwrap();
    c.put_block_list("b", &["00000000".to_string()], &Default::default())
        .await
        .unwrap();
    assert_eq!(
        c.get_range("b", 1, 2).await.unwrap(),
        Bytes::from_static(b"bc")
    );
}

#[tokio::test]
async fn a_wrong_key_is_a_final_403() {
    let env = TestEnv::start().await;
    let wrong =
        env.account
            .clone()
            .with_credential(tablevault_azure::credential::Credential::SharedKey(
                SharedKeyCredential::from_base64(EMULATOR_ACCOUNT, "d3JvbmdrZXk=").unwrap(),
            ));
    let err = TableClient::new(&wrong)
        .unwrap()
        .list_tables()
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(403));
    assert!(!err.is_retryable());

    // A backup whose source credentials are refused says which setting to check.
    let location = tablevault_coordinator::Location {
        account: env.account.clone(),
        container: unique_lower("bk"),
        queue: unique_lower("q"),
        client_options: Default::default(),
        backends: None,
    };
    let req = tablevault_coordinator::backup::BackupRequest::new(wrong);
    let opts = tablevault_coordinator::watch::WatchOptions::new(Default::default());
    let err = tablevault_coordinator::backup::run_backup(&req, &location, &opts)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("source account devstoreaccount1") && text.contains("TABLEVAULT_SOURCE"),
        "{text}"
    );
    assert_eq!(
        tablevault_cli::exit::error_code(&err),
        tablevault_cli::exit::ExitCode::Usage
    );
}

/// A service SAS for one table (`tn=`, version 2019-02-02 layout, as the Azure SDKs make
/// it): `sp\nst\nse\n/table/account/table\nsi\nsip\nspr\nsv\nspk\nsrk\nepk\nerk`.
fn table_sas(table: &str, sp: &str) -> String {
    let (se, sv) = ("2099-01-01T00:00:00Z", "2019-02-02");
    let resource = format!("/table/{EMULATOR_ACCOUNT}/{}", table.to_lowercase());
    let sts = format!("{sp}\n\n{se}\n{resource}\n\n\n\n{sv}\n\n\n\n");
    let sig = SharedKeyCredential::from_base64(EMULATOR_ACCOUNT, EMULATOR_KEY)
        .unwrap()
        .sign(&sts);
    format!(
        "sv={sv}&tn={table}&sp={sp}&se={}&sig={}",
        enc(se),
        enc(&sig)
    )
}

/// Regression: a SAS for one table (least privilege: read that table, nothing else) could
/// not back it up, as planning listed the account's tables first and the service
/// refused the listing. With `--tables` naming it, each table is now read instead.
#[tokio::test]
async fn a_sas_for_one_table_backs_it_up_when_named() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("onesas");
    let other = unique_table("other");
    let source = load_numbered(&client, &table, 3, 40).await;
    load_numbered(&client, &other, 1, 5).await;
    let endpoints: String = env
        .connection_string()
        .split(';')
        .filter(|p| p.starts_with("TableEndpoint="))
        .map(|p| format!("{p};"))
        .collect();
    let scoped = |table: &str| {
        StorageAccount::from_connection_string(&format!(
            "{endpoints}SharedAccessSignature={}",
            table_sas(table, "r")
        ))
        .unwrap()
    };
    let t = support::target(&env.account);
    let backup = |sas_for: &str, tables: Option<Vec<String>>| {
        let source = scoped(sas_for);
        let mut req = tablevault_coordinator::backup::BackupRequest::new(source.clone());
        req.tables = tables;
        let (t, opts) = (t.clone(), support::watch_opts(2, &source));
        async move { tablevault_coordinator::backup::run_backup(&req, &t, &opts).await }
    };

    let report = backup(&table, Some(vec![table.clone()])).await.unwrap();
    assert_eq!(
        (report.status.as_str(), report.entities),
        ("complete", source.len() as u64)
    );

    // Not named: the listing's refusal says how such a SAS is used.
    let text = backup(&table, None).await.unwrap_err().to_string();
    assert!(text.contains("tn=") && text.contains("--tables"), "{text}");
    // A table the SAS does not cover is refused by name; its own table, dropped, is not
    // found.
    let text = backup(&table, Some(vec![table.clone(), other.clone()]))
        .await
        .unwrap_err()
        .to_string();
    assert!(text.contains(&format!("nor read table {other}")), "{text}");
    let gone = unique_table("gone");
    let text = backup(&gone, Some(vec![gone.clone()]))
        .await
        .unwrap_err()
        .to_string();
    assert!(text.contains("not found"), "{text}");
    // Whether a table is there (verify --against, restore's plan) is told without the
    // listing too.
    let exists = |sas_for: &str| {
        let client = TableClient::new(&scoped(sas_for)).unwrap();
        let name = sas_for.to_string();
        async move { client.table_exists(&name).await.unwrap() }
    };
    assert!(exists(&table).await);
    assert!(!exists(&gone).await);
}

// ---------------------------------------------------------------------------------------
// Microsoft Entra ID (`--auth-mode login`) against Azurite's OAuth mode over HTTPS, with a
// fake Entra token endpoint (tests/src/fake_entra.rs). Azurite 3.37 checks a bearer token's
// issuer, audience and lifetime but not its signature, and answers a token it does not
// accept with 403 AuthenticationFailed (the service says 401).

mod login {
    use std::path::PathBuf;
    use std::time::Duration;

    use bytes::Bytes;
    use tablevault_azure::blob::BlobClient;
    use tablevault_azure::config::{AccountSetting, AuthConfig, StorageAccount};
    use tablevault_azure::identity::{IdentityConfig, IdentityKind};
    use tablevault_azure::queue::{MessageTtl, QueueClient};
    use tablevault_azure::redact::Secret;
    use tablevault_azure::table::{Entity, TableClient};
    use tablevault_dev::emulator::Azurite;
    use tablevault_dev::tls::TestCertificate;
    use tablevault_tests::fake_entra::{self, FakeEntra};
    use tablevault_tests::{unique_lower, unique_table};

    const SETTING: AccountSetting = AccountSetting {
        what: "backup",
        flag: "--backup",
        env: "TABLEVAULT_BACKUP",
    };

    /// Azurite in OAuth mode, trusted through the throwaway CA.
    async fn azurite() -> Azurite {
        tablevault_azure::pipeline::trust_ca_certificate(
            TestCertificate::shared().ca_pem.as_bytes(),
        )
        .unwrap();
        Azurite::start_oauth()
            .await
            .unwrap_or_else(|e| panic!("cannot start Azurite in OAuth mode: {e}"))
    }

    fn identity(kind: IdentityKind, entra: &FakeEntra) -> IdentityConfig {
        IdentityConfig {
            kind,
            client_id: Some(fake_entra::CLIENT_ID.into()),
            tenant_id: Some(fake_entra::TENANT.into()),
            authority_host: Some(entra.authority.clone()),
            client_secret: Some(Secret::new(fake_entra::SECRET.into())),
            ..Default::default()
        }
    }

    fn login_account(azurite: &Azurite, identity: IdentityConfig) -> StorageAccount {
        StorageAccount::resolve_with(
            Some(&azurite.endpoints()),
            SETTING,
            &AuthConfig::login(identity),
        )
        .unwrap()
    }

    async fn touch_table(account: &StorageAccount) {
        let t = TableClient::new(account).unwrap();
        let name = unique_table("login");
        t.create_table(&name).await.unwrap();
        t.insert_entity(&name, &Entity::new("p", "r"))
            .await
            .unwrap();
        assert!(t.get_entity(&name, "p", "r").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn client_secret_login_works_for_all_three_services_with_one_token() {
        let (azurite, entra) = (azurite().await, FakeEntra::start().await);
        let account = login_account(&azurite, identity(IdentityKind::ClientSecret, &entra));
        touch_table(&account).await;

        let q = QueueClient::new(&account, &unique_lower("q")).unwrap();
        q.create().await.unwrap();
        q.put_message("m", None, MessageTtl::Never).await.unwrap();
        let got = q.get_messages(1, Duration::from_secs(5)).await.unwrap();
        assert_eq!(got.len(), 1);

        let c = BlobClient::new(&account, &unique_lower("c")).unwrap();
        c.create_container().await.unwrap();
        c.put_block("b", "00000000", Bytes::from_static(b"abc"))
            .await
            .unwrap();
        c.put_block_list("b", &["00000000".to_string()], &Default::default())
            .await
            .unwrap();
        assert_eq!(
            c.get_range("b", 0, 3).await.unwrap(),
            Bytes::from_static(b"abc")
        );
        // A second account setting with the same identity shares the token.
        let again = login_account(&azurite, identity(IdentityKind::ClientSecret, &entra));
        touch_table(&again).await;
        assert_eq!(
            entra.requests(),
            1,
            "one token for every service and account"
        );
    }

    #[tokio::test]
    async fn a_token_near_expiry_is_refreshed() {
        let (azurite, entra) = (azurite().await, FakeEntra::start().await);
        let lifetime = |s: u64| {
            entra
                .shared
                .expires_in
                .store(s, std::sync::atomic::Ordering::SeqCst)
        };
        // Issued for 33 s, under the five minutes of refresh margin: reused until
        // half-way through its life, not fetched again for every request (it was,
        // 64 token requests for 64 storage requests).
        lifetime(33);
        let account = login_account(&azurite, identity(IdentityKind::ClientSecret, &entra));
        let t = TableClient::new(&account).unwrap();
        t.list_tables().await.unwrap();
        t.list_tables().await.unwrap();
        assert_eq!(entra.requests(), 1, "a short-lived token is reused");
        // 4 s on, 29 s are left, which count as expired: fetched anew.
        tokio::time::sleep(std::time::Duration::from_secs(4)).await;
        lifetime(3600);
        t.list_tables().await.unwrap();
        assert_eq!(entra.requests(), 2, "a token about to expire is refreshed");
        t.list_tables().await.unwrap();
        t.list_tables().await.unwrap();
        assert_eq!(entra.requests(), 2, "a fresh token is reused");
    }

    #[tokio::test]
    async fn a_refused_token_names_the_identity_and_account_but_not_the_token() {
        let (azurite, entra) = (azurite().await, FakeEntra::start().await);
        *entra.shared.audience.lock().unwrap() = "https://vault.azure.net".into();
        let account = login_account(&azurite, identity(IdentityKind::ClientSecret, &entra));
        let err = TableClient::new(&account)
            .unwrap()
            .list_tables()
            .await
            .unwrap_err();
        assert!(matches!(err.status(), Some(401 | 403)), "{err}");
        assert!(!err.is_retryable());
        let text = err.to_string();
        for part in [
            fake_entra::CLIENT_ID,
            fake_entra::OBJECT_ID,
            "table service of account devstoreaccount1",
            "https://storage.azure.com",
        ] {
            assert!(text.contains(part), "{part:?} missing in: {text}");
        }
        assert!(!text.contains("eyJ"), "token text in: {text}");
        assert!(!text.contains(fake_entra::SECRET), "{text}");
    }

    #[tokio::test]
    async fn workload_identity_exchanges_the_federated_token() {
        let (azurite, entra) = (azurite().await, FakeEntra::start().await);
        let dir = std::env::temp_dir().join(unique_lower("tv-wi"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "kubernetes-service-account-token").unwrap();
        let mut id = identity(IdentityKind::Auto, &entra);
        id.client_secret = None;
        id.federated_token_file = Some(file);
        let account = login_account(&azurite, id);
        touch_table(&account).await;
        assert_eq!(entra.requests(), 1);
        assert_eq!(
            entra.shared.last_assertion.lock().unwrap().as_deref(),
            Some("kubernetes-service-account-token")
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Runs the ignored test `name` of this binary in a child process with `vars` set
    /// (process-wide settings such as PATH stay out of the test process) and the test
    /// CA trusted; asserts it ran and passed, and returns its output.
    async fn run_child(name: &str, vars: &[(&str, String)]) -> String {
        let out = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--ignored", "--nocapture"])
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .env(
                tablevault_azure::pipeline::CA_CERT_ENV,
                &TestCertificate::shared().ca_path,
            )
            .output()
            .await
            .unwrap();
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "child failed:\n{log}");
        assert!(log.contains("1 passed"), "child ran no test:\n{log}");
        log
    }

    const CHILD_ENV: &str = "TV_TEST_AZ_CHILD_ENDPOINTS";

    /// Runs in a child process of `azure_cli_identity_runs_az_from_path`, with a fake `az`
    /// first on PATH (PATH is process-wide, so it is not changed in the test process).
    #[tokio::test]
    #[ignore = "run by azure_cli_identity_runs_az_from_path in a child process"]
    async fn azure_cli_child() {
        let Ok(endpoints) = std::env::var(CHILD_ENV) else {
            return;
        };
        let id = IdentityConfig {
            kind: IdentityKind::AzureCli,
            ..Default::default()
        };
        let account =
            StorageAccount::resolve_with(Some(&endpoints), SETTING, &AuthConfig::login(id))
                .unwrap();
        touch_table(&account).await;
        let t = TableClient::new(&account).unwrap();
        t.list_tables().await.unwrap();
    }

    #[tokio::test]
    async fn azure_cli_identity_runs_az_from_path() {
        let azurite = azurite().await;
        let dir: PathBuf = std::env::temp_dir().join(unique_lower("tv-az"));
        std::fs::create_dir_all(&dir).unwrap();
        let calls = dir.join("calls");
        let token = fake_entra::mint_token("https://storage.azure.com", 3600);
        let expires_on = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600;
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncat <<'EOF'\n{{\"accessToken\": \"{token}\", \"expires_on\": {expires_on}, \"tokenType\": \"Bearer\"}}\nEOF\n",
            calls.display()
        );
        let az = dir.join("az");
        std::fs::write(&az, script).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&az, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = format!(
            "{}:{}",
            dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        run_child(
            "login::azure_cli_child",
            &[("PATH", path), (CHILD_ENV, azurite.endpoints())],
        )
        .await;
        let calls = std::fs::read_to_string(&calls).unwrap();
        assert_eq!(
            calls.lines().count(),
            1,
            "az runs once, then the cache serves"
        );
        assert!(
            calls.contains("account get-access-token")
                && calls.contains("https://storage.azure.com/.default"),
            "{calls}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    const MSI_CHILD_ENV: &str = "TV_TEST_MSI_CHILD_ENDPOINTS";

    /// Runs in a child process of `managed_identity_gets_tokens_from_the_hosts_endpoint`,
    /// with App Service's `IDENTITY_ENDPOINT`/`IDENTITY_HEADER` pointing at a fake (the
    /// variables are process-wide, so they are not set in the test process).
    #[tokio::test]
    #[ignore = "run by managed_identity_gets_tokens_from_the_hosts_endpoint in a child process"]
    async fn managed_identity_child() {
        let Ok(endpoints) = std::env::var(MSI_CHILD_ENV) else {
            return;
        };
        let mut id = IdentityConfig::from_env(IdentityKind::Managed);
        id.managed_identity = Some(tablevault_azure::identity::ManagedIdentityId::ClientId(
            fake_entra::CLIENT_ID.into(),
        ));
        let account =
            StorageAccount::resolve_with(Some(&endpoints), SETTING, &AuthConfig::login(id))
                .unwrap();
        touch_table(&account).await;
        let q = tablevault_azure::queue::QueueClient::new(&account, &unique_lower("msi")).unwrap();
        q.create().await.unwrap();
    }

    /// A fake App Service managed identity endpoint (plain HTTP on loopback, as the host
    /// provides it): checks the secret header and the resource, counts requests, and
    /// returns the query strings it saw.
    async fn fake_msi_endpoint() -> (
        String,
        std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        tokio::task::JoinHandle<()>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        let Ok(n) = tcp.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let head = String::from_utf8_lossy(&buf).to_string();
                    let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    log.lock().unwrap().push(target.clone());
                    let authorized = head
                        .to_ascii_lowercase()
                        .contains("x-identity-header: msi-secret");
                    let (status, body) = if authorized && target.contains("resource=https") {
                        let expires_on = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .unwrap()
                            .as_secs()
                            + 3600;
                        (
                            "200 OK",
                            serde_json::json!({
                                "access_token": fake_entra::mint_token("https://storage.azure.com", 3600),
                                "expires_on": expires_on.to_string(),
                                "resource": "https://storage.azure.com",
                                "token_type": "Bearer",
                            })
                            .to_string(),
                        )
                    } else {
                        ("400 Bad Request", r#"{"error":"bad request"}"#.to_string())
                    };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tcp.write_all(reply.as_bytes()).await;
                });
            }
        });
        (format!("http://127.0.0.1:{port}/msi/token"), seen, task)
    }

    #[tokio::test]
    async fn managed_identity_gets_tokens_from_the_hosts_endpoint() {
        let azurite = azurite().await;
        let (endpoint, seen, server) = fake_msi_endpoint().await;
        let log = run_child(
            "login::managed_identity_child",
            &[
                ("IDENTITY_ENDPOINT", endpoint),
                ("IDENTITY_HEADER", "msi-secret".into()),
                (MSI_CHILD_ENV, azurite.endpoints()),
            ],
        )
        .await;
        server.abort();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "one token for table and queue: {seen:?}");
        assert!(
            seen[0].contains("resource=https%3A%2F%2Fstorage.azure.com")
                && seen[0].contains(fake_entra::CLIENT_ID),
            "the storage resource, for the user-assigned identity: {seen:?}"
        );
        assert!(
            !log.contains("msi-secret"),
            "the host's secret is never logged"
        );
    }
}
