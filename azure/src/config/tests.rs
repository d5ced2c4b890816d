//! Table-driven tests of connection-string parsing: what is accepted, and what is
//! refused with a message that names the problem and never the secret.

use super::*;

const KEY: &str = "a2V5a2V5a2V5a2V5"; // base64("keykeykeykeykey")... valid base64

fn ok(s: &str) -> StorageAccount {
    StorageAccount::from_connection_string(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

pub(super) fn ep(a: &StorageAccount, s: Service) -> String {
    a.endpoint(s)
        .unwrap()
        .as_str()
        .trim_end_matches('/')
        .to_string()
}

#[test]
fn accepted_connection_strings() {
    // (input, account, blob, queue, table, credential kind)
    let cases: &[(&str, &str, &str, &str, &str, &str)] = &[
        (
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5a2V5a2V5a2V5;EndpointSuffix=core.windows.net",
            "acct",
            "https://acct.blob.core.windows.net",
            "https://acct.queue.core.windows.net",
            "https://acct.table.core.windows.net",
            "SharedKey",
        ),
        (
            "AccountName=acct;AccountKey=a2V5a2V5a2V5a2V5",
            "acct",
            "https://acct.blob.core.windows.net",
            "https://acct.queue.core.windows.net",
            "https://acct.table.core.windows.net",
            "SharedKey",
        ),
        (
            "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5a2V5a2V5a2V5;EndpointSuffix=core.chinacloudapi.cn;",
            "acct",
            "http://acct.blob.core.chinacloudapi.cn",
            "http://acct.queue.core.chinacloudapi.cn",
            "http://acct.table.core.chinacloudapi.cn",
            "SharedKey",
        ),
        (
            "UseDevelopmentStorage=true",
            "devstoreaccount1",
            "http://127.0.0.1:10000/devstoreaccount1",
            "http://127.0.0.1:10001/devstoreaccount1",
            "http://127.0.0.1:10002/devstoreaccount1",
            "SharedKey",
        ),
        (
            "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://myproxy",
            "devstoreaccount1",
            "http://myproxy:10000/devstoreaccount1",
            "http://myproxy:10001/devstoreaccount1",
            "http://myproxy:10002/devstoreaccount1",
            "SharedKey",
        ),
        (
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1/;",
            "devstoreaccount1",
            "http://127.0.0.1:10000/devstoreaccount1",
            "http://127.0.0.1:10001/devstoreaccount1",
            "http://127.0.0.1:10002/devstoreaccount1",
            "SharedKey",
        ),
        (
            "BlobEndpoint=https://acct.blob.core.windows.net/;QueueEndpoint=https://acct.queue.core.windows.net/;TableEndpoint=https://acct.table.core.windows.net/;SharedAccessSignature=sv=2022-11-02&ss=bqt&srt=sco&sp=rwdlacup&se=2030-01-01T00:00:00Z&sig=abc%2Bdef%3D",
            "acct",
            "https://acct.blob.core.windows.net",
            "https://acct.queue.core.windows.net",
            "https://acct.table.core.windows.net",
            "Sas",
        ),
        (
            // Cosmos DB for Table, with a FileEndpoint-style key it ignores, and odd case.
            "defaultendpointsprotocol=https;accountname=cosmo;accountkey=a2V5a2V5a2V5a2V5;TableEndpoint=https://cosmo.table.cosmos.azure.com:443/;FileEndpoint=https://x.file.core.windows.net/",
            "cosmo",
            "https://cosmo.blob.core.windows.net",
            "https://cosmo.queue.core.windows.net",
            "https://cosmo.table.cosmos.azure.com",
            "SharedKey",
        ),
    ];
    for (input, name, blob, queue, table, cred) in cases {
        let a = ok(input);
        assert_eq!(a.name(), *name, "{input}");
        assert_eq!(ep(&a, Service::Blob), *blob, "{input}");
        assert_eq!(ep(&a, Service::Queue), *queue, "{input}");
        assert_eq!(ep(&a, Service::Table), *table, "{input}");
        let kind = match a.credential() {
            Credential::SharedKey(_) => "SharedKey",
            Credential::Sas(_) => "Sas",
            Credential::Token(_) => "Token",
        };
        assert_eq!(kind, *cred, "{input}");
    }
}

/// An account key as the portal shows it (88 characters of base64).
const PASTED: &str =
    "Eby8vdM02xNOcqFlqUwJPLlCEtaD9hjmbfMbkQw6RLY3IvRTQlvu3fUsmTAsBwaoQ2JDnRlQ9uBtMd3Unid/ow==";

#[test]
fn rejected_connection_strings_say_what_is_wrong_without_the_key() {
    let secret = "c2VjcmV0c2VjcmV0";
    let cases: &[(String, &str)] = &[
        (String::new(), "is empty"),
        ("  ;; ".into(), "is empty"),
        (
            format!("AccountName=a;AccountKey{secret}"),
            "segment 2 has no '='",
        ),
        (
            format!("AccountName=a;AccountKey={secret};AccountName=b"),
            "sets AccountName twice",
        ),
        (
            format!("AccountName=a;AcountKey={secret}"),
            "unknown key \"AcountKey\"",
        ),
        (
            "AccountName=a;AccountKey=not*base64!".into(),
            "AccountKey is not valid base64",
        ),
        (
            format!("AccountKey={secret}"),
            "AccountKey but no AccountName",
        ),
        (
            "AccountName=a".into(),
            "neither AccountKey nor SharedAccessSignature",
        ),
        (
            format!("AccountName=a;AccountKey={secret};SharedAccessSignature=sig={secret}"),
            "both AccountKey and SharedAccessSignature",
        ),
        (
            format!("DefaultEndpointsProtocol=ftp;AccountName=a;AccountKey={secret}"),
            "must be http or https",
        ),
        (
            format!("AccountName=a;AccountKey={secret};BlobEndpoint=not a url"),
            "BlobEndpoint is not a valid http(s) URL",
        ),
        (
            format!("AccountName=a;AccountKey={secret};TableEndpoint=ftp://x"),
            "scheme must be http or https",
        ),
        (
            format!("AccountName=a;AccountKey={secret};TableEndpoint=https://x/?sig={secret}"),
            "has a query string",
        ),
        ("UseDevelopmentStorage=false".into(), "must be 'true'"),
        (
            format!("UseDevelopmentStorage=true;AccountKey={secret}"),
            "cannot be combined with AccountKey",
        ),
        (
            "AccountName=;AccountKey=x".into(),
            "AccountName has an empty value",
        ),
        (format!("={secret}"), "empty key"),
        // A key pasted without its name reads as a key up to its padding.
        (
            format!("AccountName=a;{PASTED}"),
            "unknown key of 86 characters, not shown",
        ),
        (
            format!("DefaultEndpointsProtocol={PASTED};AccountName=a"),
            "must be http or https, not of 88 characters, not shown",
        ),
    ];
    for (input, expected) in cases {
        let err = StorageAccount::from_connection_string(input)
            .expect_err(input)
            .to_string();
        assert!(
            err.contains(expected),
            "{input:?} gave {err:?}, wanted {expected:?}"
        );
        assert!(!err.contains(secret), "{err} echoes the secret");
        assert!(!err.contains(&PASTED[..20]), "{err} echoes the pasted key");
    }
}

#[test]
fn missing_endpoint_is_reported_at_use() {
    let a = ok("TableEndpoint=https://x.table.core.windows.net;SharedAccessSignature=sv=1&sig=abc");
    assert_eq!(a.name(), "x");
    let err = a.endpoint(Service::Blob).unwrap_err().to_string();
    assert!(err.contains("no blob endpoint"), "{err}");
}

#[test]
fn debug_never_shows_the_key() {
    let a = ok(&format!("AccountName=acct;AccountKey={KEY}"));
    let s = format!("{a:?}");
    assert!(!s.contains(KEY) && s.contains("acct"), "{s}");
    let a =
        ok("BlobEndpoint=https://a.blob.core.windows.net;SharedAccessSignature=sv=1&sig=SECRETSIG");
    assert!(!format!("{a:?}").contains("SECRETSIG"));
}

#[test]
fn connection_string_round_trips() {
    let a = ok("UseDevelopmentStorage=true");
    let b = ok(&a.to_connection_string().unwrap());
    assert_eq!(ep(&a, Service::Table), ep(&b, Service::Table));
    assert_eq!(a.name(), b.name());
}
