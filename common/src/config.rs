//! Account configuration: Azure Storage connection strings (every key users have, including
//! `UseDevelopmentStorage=true`), account name + key, SAS and bearer-token accounts, all
//! parsed in one place into a [`StorageAccount`].
//!
//! Errors say which part is wrong and never echo a key or a signature.

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use url::Url;

use crate::auth::{Credential, SasToken, SharedKeyCredential, TokenProvider};

/// Well-known account name of the storage emulator.
pub const EMULATOR_ACCOUNT: &str = "devstoreaccount1";
/// Well-known (public) key of the storage emulator account.
pub const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The three services tablevault talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Blob storage: backup data, commit records, manifests.
    Blob,
    /// Queue storage: work distribution.
    Queue,
    /// Table storage: what is backed up and restored.
    Table,
}

impl Service {
    fn key(self) -> &'static str {
        match self {
            Service::Blob => "BlobEndpoint",
            Service::Queue => "QueueEndpoint",
            Service::Table => "TableEndpoint",
        }
    }

    fn subdomain(self) -> &'static str {
        match self {
            Service::Blob => "blob",
            Service::Queue => "queue",
            Service::Table => "table",
        }
    }

    fn emulator_port(self) -> u16 {
        match self {
            Service::Blob => 10000,
            Service::Queue => 10001,
            Service::Table => 10002,
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.subdomain())
    }
}

/// Why an account description was rejected. Messages name the offending key but never
/// print secret values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Nothing to parse.
    #[error("connection string is empty")]
    Empty,
    /// A `;`-separated segment has no `=`.
    #[error(
        "connection string segment {position} has no '=': expected Key=Value pairs separated by ';'"
    )]
    MissingEquals {
        /// 1-based position of the segment.
        position: usize,
    },
    /// A segment starts with `=`.
    #[error("connection string segment {position} has an empty key")]
    EmptyKey {
        /// 1-based position of the segment.
        position: usize,
    },
    /// A key appears twice.
    #[error("connection string sets {key} twice")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// A key nobody defines (often a typo).
    #[error(
        "connection string has unknown key {key:?}; known keys are DefaultEndpointsProtocol, AccountName, \
         AccountKey, EndpointSuffix, BlobEndpoint, QueueEndpoint, TableEndpoint, FileEndpoint, \
         SharedAccessSignature, UseDevelopmentStorage, DevelopmentStorageProxyUri"
    )]
    UnknownKey {
        /// The key as written (keys are never secret).
        key: String,
    },
    /// A value is present but empty.
    #[error("connection string key {key} has an empty value")]
    EmptyValue {
        /// The key.
        key: String,
    },
    /// `AccountKey` is not valid base64. The value is not shown.
    #[error("AccountKey is not valid base64 (value not shown)")]
    InvalidAccountKey,
    /// `DefaultEndpointsProtocol` is not http or https.
    #[error("DefaultEndpointsProtocol must be http or https, not {0:?}")]
    InvalidProtocol(String),
    /// An endpoint value is not a usable http(s) URL.
    #[error("{key} is not a valid http(s) URL: {reason}")]
    InvalidEndpoint {
        /// The endpoint key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `UseDevelopmentStorage` has a value other than `true`.
    #[error("UseDevelopmentStorage must be 'true'")]
    InvalidDevelopmentStorage,
    /// `UseDevelopmentStorage=true` combined with account settings.
    #[error("UseDevelopmentStorage=true cannot be combined with {key}")]
    DevelopmentStorageConflict {
        /// The conflicting key.
        key: String,
    },
    /// Both an account key and a SAS were given.
    #[error("connection string has both AccountKey and SharedAccessSignature; give one")]
    AmbiguousCredential,
    /// No way to authenticate.
    #[error("connection string has neither AccountKey nor SharedAccessSignature")]
    MissingCredential,
    /// `AccountKey` without `AccountName`.
    #[error("connection string has AccountKey but no AccountName")]
    MissingAccountName,
    /// The account has no endpoint for a service it is used for.
    #[error(
        "no {service} endpoint: set {key} or AccountName (with DefaultEndpointsProtocol/EndpointSuffix) in the connection string"
    )]
    MissingEndpoint {
        /// The service that has no endpoint.
        service: Service,
        /// The connection-string key that would provide it.
        key: &'static str,
    },
    /// A required setting was not given at all (no option, no environment variable).
    #[error("{0}")]
    NotConfigured(String),
}

/// One storage account: its name, an endpoint per service and how to authenticate.
#[derive(Clone)]
pub struct StorageAccount {
    name: String,
    blob: Option<Url>,
    queue: Option<Url>,
    table: Option<Url>,
    credential: Credential,
}

impl fmt::Debug for StorageAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageAccount")
            .field("name", &self.name)
            .field("blob", &self.blob.as_ref().map(Url::as_str))
            .field("queue", &self.queue.as_ref().map(Url::as_str))
            .field("table", &self.table.as_ref().map(Url::as_str))
            .field("credential", &self.credential)
            .finish()
    }
}

impl StorageAccount {
    /// Parses an Azure Storage connection string.
    pub fn from_connection_string(text: &str) -> Result<Self, ConfigError> {
        ConnectionString::parse(text)?.into_account()
    }

    /// An account addressed by name on the public cloud, authenticated with its key.
    pub fn from_key(name: &str, key_base64: &str) -> Result<Self, ConfigError> {
        let credential = Credential::SharedKey(SharedKeyCredential::from_base64(name, key_base64)?);
        Ok(Self::on_public_cloud(name, credential))
    }

    /// An account on the public cloud authenticated with a SAS token (with or without `?`).
    pub fn from_sas(name: &str, sas: &str) -> Result<Self, ConfigError> {
        Ok(Self::on_public_cloud(
            name,
            Credential::Sas(SasToken::parse(sas)?),
        ))
    }

    /// An account on the public cloud authenticated with Microsoft Entra ID tokens.
    pub fn from_token_provider(name: &str, provider: Arc<dyn TokenProvider>) -> Self {
        Self::on_public_cloud(name, Credential::Token(provider))
    }

    fn on_public_cloud(name: &str, credential: Credential) -> Self {
        let endpoint = |s: Service| {
            Url::parse(&format!(
                "https://{name}.{}.core.windows.net",
                s.subdomain()
            ))
            .ok()
        };
        StorageAccount {
            name: name.to_string(),
            blob: endpoint(Service::Blob),
            queue: endpoint(Service::Queue),
            table: endpoint(Service::Table),
            credential,
        }
    }

    /// The local emulator at its default ports (`UseDevelopmentStorage=true`).
    pub fn emulator() -> Self {
        Self::emulator_at("http://127.0.0.1").expect("static URL is valid")
    }

    fn emulator_at(proxy: &str) -> Result<Self, ConfigError> {
        let base = parse_endpoint("DevelopmentStorageProxyUri", proxy)?;
        let endpoint = |s: Service| {
            let mut u = base.clone();
            // A proxy URI without an explicit port gets the emulator's default port.
            if u.port().is_none() {
                let _ = u.set_port(Some(s.emulator_port()));
            }
            u.set_path(&format!("/{EMULATOR_ACCOUNT}"));
            Some(u)
        };
        Ok(StorageAccount {
            name: EMULATOR_ACCOUNT.to_string(),
            blob: endpoint(Service::Blob),
            queue: endpoint(Service::Queue),
            table: endpoint(Service::Table),
            credential: Credential::SharedKey(SharedKeyCredential::from_base64(
                EMULATOR_ACCOUNT,
                EMULATOR_KEY,
            )?),
        })
    }

    /// The account name (used in signatures and as the account's identity in job files).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The credential.
    pub fn credential(&self) -> &Credential {
        &self.credential
    }

    /// The endpoint of a service, without a trailing slash.
    pub fn endpoint(&self, service: Service) -> Result<&Url, ConfigError> {
        let e = match service {
            Service::Blob => &self.blob,
            Service::Queue => &self.queue,
            Service::Table => &self.table,
        };
        e.as_ref().ok_or(ConfigError::MissingEndpoint {
            service,
            key: service.key(),
        })
    }

    /// Replaces one endpoint (e.g. to point a test at a mock server).
    pub fn with_endpoint(mut self, service: Service, url: &str) -> Result<Self, ConfigError> {
        let u = Some(parse_endpoint(service.key(), url)?);
        match service {
            Service::Blob => self.blob = u,
            Service::Queue => self.queue = u,
            Service::Table => self.table = u,
        }
        Ok(self)
    }

    /// Replaces the credential.
    pub fn with_credential(mut self, credential: Credential) -> Self {
        self.credential = credential;
        self
    }

    /// A connection string that reproduces this account, for handing to child processes
    /// in tests and the demo. It contains the secret, so never log it.
    pub fn to_connection_string(&self) -> Option<String> {
        let mut s = format!("DefaultEndpointsProtocol=http;AccountName={};", self.name);
        match &self.credential {
            Credential::SharedKey(k) => {
                s.push_str(&format!("AccountKey={};", k.key_base64()));
            }
            Credential::Sas(sas) => s.push_str(&format!("SharedAccessSignature={};", sas.query())),
            _ => return None,
        }
        for svc in [Service::Blob, Service::Queue, Service::Table] {
            if let Ok(u) = self.endpoint(svc) {
                s.push_str(&format!(
                    "{}={};",
                    svc.key(),
                    u.as_str().trim_end_matches('/')
                ));
            }
        }
        Some(s)
    }
}

/// The key/value pairs of a connection string, validated but not yet turned into an account.
#[derive(Default)]
struct ConnectionString {
    protocol: Option<String>,
    account_name: Option<String>,
    account_key: Option<String>,
    endpoint_suffix: Option<String>,
    blob: Option<String>,
    queue: Option<String>,
    table: Option<String>,
    sas: Option<String>,
    use_dev: Option<String>,
    dev_proxy: Option<String>,
    /// Keys seen (lower-case), to report duplicates and conflicts.
    seen: Vec<&'static str>,
}

impl ConnectionString {
    fn parse(text: &str) -> Result<Self, ConfigError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(ConfigError::Empty);
        }
        let mut cs = ConnectionString::default();
        for (i, segment) in text.split(';').enumerate() {
            let segment = segment.trim();
            if segment.is_empty() {
                continue;
            }
            let position = i + 1;
            // Split on the first '=' only: keys and SAS values contain '='.
            let (key, value) = segment
                .split_once('=')
                .ok_or(ConfigError::MissingEquals { position })?;
            let key = key.trim();
            let value = value.trim();
            if key.is_empty() {
                return Err(ConfigError::EmptyKey { position });
            }
            let (canonical, slot): (&'static str, &mut Option<String>) = match key
                .to_ascii_lowercase()
                .as_str()
            {
                "defaultendpointsprotocol" => ("DefaultEndpointsProtocol", &mut cs.protocol),
                "accountname" => ("AccountName", &mut cs.account_name),
                "accountkey" => ("AccountKey", &mut cs.account_key),
                "endpointsuffix" => ("EndpointSuffix", &mut cs.endpoint_suffix),
                "blobendpoint" => ("BlobEndpoint", &mut cs.blob),
                "queueendpoint" => ("QueueEndpoint", &mut cs.queue),
                "tableendpoint" => ("TableEndpoint", &mut cs.table),
                "sharedaccesssignature" => ("SharedAccessSignature", &mut cs.sas),
                "usedevelopmentstorage" => ("UseDevelopmentStorage", &mut cs.use_dev),
                "developmentstorageproxyuri" => ("DevelopmentStorageProxyUri", &mut cs.dev_proxy),
                // Accepted because portals emit them; tablevault does not use them.
                "fileendpoint"
                | "blobsecondaryendpoint"
                | "queuesecondaryendpoint"
                | "tablesecondaryendpoint"
                | "filesecondaryendpoint" => continue,
                _ => {
                    return Err(ConfigError::UnknownKey {
                        key: key.to_string(),
                    });
                }
            };
            if slot.is_some() {
                return Err(ConfigError::DuplicateKey {
                    key: canonical.to_string(),
                });
            }
            if value.is_empty() {
                return Err(ConfigError::EmptyValue {
                    key: canonical.to_string(),
                });
            }
            *slot = Some(value.to_string());
            cs.seen.push(canonical);
        }
        if cs.seen.is_empty() {
            return Err(ConfigError::Empty);
        }
        Ok(cs)
    }

    fn into_account(self) -> Result<StorageAccount, ConfigError> {
        if let Some(dev) = &self.use_dev {
            if !dev.eq_ignore_ascii_case("true") {
                return Err(ConfigError::InvalidDevelopmentStorage);
            }
            if let Some(other) = self
                .seen
                .iter()
                .find(|k| !matches!(**k, "UseDevelopmentStorage" | "DevelopmentStorageProxyUri"))
            {
                return Err(ConfigError::DevelopmentStorageConflict {
                    key: other.to_string(),
                });
            }
            return StorageAccount::emulator_at(
                self.dev_proxy.as_deref().unwrap_or("http://127.0.0.1"),
            );
        }
        if self.dev_proxy.is_some() {
            return Err(ConfigError::UnknownKey {
                key: "DevelopmentStorageProxyUri (only valid with UseDevelopmentStorage=true)"
                    .into(),
            });
        }
        let protocol = match self.protocol.as_deref() {
            None => "https",
            Some(p) if p.eq_ignore_ascii_case("https") => "https",
            Some(p) if p.eq_ignore_ascii_case("http") => "http",
            Some(p) => return Err(ConfigError::InvalidProtocol(p.to_string())),
        };
        let suffix = self
            .endpoint_suffix
            .as_deref()
            .unwrap_or("core.windows.net")
            .trim_matches('.');
        let endpoint =
            |svc: Service, explicit: &Option<String>| -> Result<Option<Url>, ConfigError> {
                match (explicit, &self.account_name) {
                    (Some(e), _) => parse_endpoint(svc.key(), e).map(Some),
                    (None, Some(name)) => parse_endpoint(
                        svc.key(),
                        &format!("{protocol}://{name}.{}.{suffix}", svc.subdomain()),
                    )
                    .map(Some),
                    (None, None) => Ok(None),
                }
            };
        let blob = endpoint(Service::Blob, &self.blob)?;
        let queue = endpoint(Service::Queue, &self.queue)?;
        let table = endpoint(Service::Table, &self.table)?;

        let credential = match (&self.account_key, &self.sas) {
            (Some(_), Some(_)) => return Err(ConfigError::AmbiguousCredential),
            (Some(key), None) => {
                let name = self
                    .account_name
                    .as_deref()
                    .ok_or(ConfigError::MissingAccountName)?;
                Credential::SharedKey(SharedKeyCredential::from_base64(name, key)?)
            }
            (None, Some(sas)) => Credential::Sas(SasToken::parse(sas)?),
            (None, None) => return Err(ConfigError::MissingCredential),
        };
        let name = match &self.account_name {
            Some(n) => n.clone(),
            None => [&blob, &queue, &table]
                .into_iter()
                .flatten()
                .find_map(account_name_from_endpoint)
                .unwrap_or_default(),
        };
        Ok(StorageAccount {
            name,
            blob,
            queue,
            table,
            credential,
        })
    }
}

/// Guesses the account name from an endpoint: the first host label on the public cloud, the
/// first path segment for path-style (emulator, IP) endpoints.
fn account_name_from_endpoint(url: &Url) -> Option<String> {
    match url.host() {
        Some(url::Host::Domain(d)) if d.contains('.') && d != "localhost" => {
            d.split('.').next().map(str::to_string)
        }
        _ => url
            .path_segments()
            .and_then(|mut s| s.next())
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    }
}

fn parse_endpoint(key: &str, value: &str) -> Result<Url, ConfigError> {
    let err = |reason: &str| ConfigError::InvalidEndpoint {
        key: key.to_string(),
        reason: reason.to_string(),
    };
    let mut url = Url::parse(value.trim()).map_err(|e| err(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(err("the scheme must be http or https"));
    }
    if url.host().is_none() {
        return Err(err("it has no host"));
    }
    if url.query().is_some() {
        return Err(err(
            "it has a query string; put a SAS in SharedAccessSignature instead",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(err("it must not contain user information"));
    }
    let path = url.path().trim_end_matches('/').to_string();
    url.set_path(&path);
    url.set_fragment(None);
    Ok(url)
}

pub(crate) fn decode_account_key(key: &str) -> Result<Vec<u8>, ConfigError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map_err(|_| ConfigError::InvalidAccountKey)?;
    if bytes.is_empty() {
        return Err(ConfigError::InvalidAccountKey);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "a2V5a2V5a2V5a2V5"; // base64("keykeykeykeykey")... valid base64

    fn ok(s: &str) -> StorageAccount {
        StorageAccount::from_connection_string(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn ep(a: &StorageAccount, s: Service) -> String {
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
        }
    }

    #[test]
    fn missing_endpoint_is_reported_at_use() {
        let a =
            ok("TableEndpoint=https://x.table.core.windows.net;SharedAccessSignature=sv=1&sig=abc");
        assert_eq!(a.name(), "x");
        let err = a.endpoint(Service::Blob).unwrap_err().to_string();
        assert!(err.contains("no blob endpoint"), "{err}");
    }

    #[test]
    fn debug_never_shows_the_key() {
        let a = ok(&format!("AccountName=acct;AccountKey={KEY}"));
        let s = format!("{a:?}");
        assert!(!s.contains(KEY) && s.contains("acct"), "{s}");
        let a = ok(
            "BlobEndpoint=https://a.blob.core.windows.net;SharedAccessSignature=sv=1&sig=SECRETSIG",
        );
        assert!(!format!("{a:?}").contains("SECRETSIG"));
    }

    #[test]
    fn connection_string_round_trips() {
        let a = ok("UseDevelopmentStorage=true");
        let b = ok(&a.to_connection_string().unwrap());
        assert_eq!(ep(&a, Service::Table), ep(&b, Service::Table));
        assert_eq!(a.name(), b.name());
    }
}
