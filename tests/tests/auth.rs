//! Authentication schemes end to end against Azurite: Shared Key Lite for Table, and an
//! account SAS (generated here the way the portal does) for all three services.

use bytes::Bytes;
use tablevault_azure::ClientOptions;
use tablevault_azure::blob::BlobClient;
use tablevault_azure::config::{EMULATOR_ACCOUNT, EMULATOR_KEY, StorageAccount};
use tablevault_azure::credential::{SharedKeyCredential, TableAuthScheme};
use tablevault_azure::queue::{MessageTtl, QueueClient};
use tablevault_azure::table::{EdmValue, Entity, TableClient};
use tablevault_tests::{TestEnv, unique_lower, unique_table};

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
    let enc = |s: &str| {
        s.replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D")
            .replace(':', "%3A")
            .replace(',', "%2C")
    };
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
}
