//! Account configuration: Azure Storage connection strings (every key users have, including
//! `UseDevelopmentStorage=true`), account name + key, SAS and bearer-token accounts, all
//! parsed in one place into a [`StorageAccount`].
//!
//! Errors say which part is wrong and never echo a key or a signature.

use std::fmt;
use std::sync::Arc;

use url::Url;

mod auth;
mod error;

pub use auth::{AuthConfig, AuthMode, fallback_configured};
pub use error::ConfigError;

use crate::credential::{Credential, SasToken, SharedKeyCredential, TokenProvider};
use crate::service::Service;

/// Well-known account name of the storage emulator.
pub const EMULATOR_ACCOUNT: &str = "devstoreaccount1";
/// Well-known (public) key of the storage emulator account.
pub const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

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
        ConnectionString::parse(text)?.into_account(None)
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
                        key: shown_name(key),
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

    /// The account; `token` is the Entra ID credential of login mode, used when the string
    /// holds neither key nor SAS (with one of them it is refused: two ways to authenticate).
    fn into_account(self, token: Option<Credential>) -> Result<StorageAccount, ConfigError> {
        if let Some(dev) = &self.use_dev {
            if token.is_some() {
                return Err(ConfigError::NotConfigured(
                    "UseDevelopmentStorage=true is the emulator's key over http; with --auth-mode login give \
                     the emulator's https endpoints (BlobEndpoint=https://127.0.0.1:10000/devstoreaccount1;...)"
                        .into(),
                ));
            }
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
            Some(p) => return Err(ConfigError::InvalidProtocol(shown_name(p))),
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
            (Some(_), None) | (None, Some(_)) if token.is_some() => {
                return Err(ConfigError::NotConfigured(
                    "auth mode login, but the connection string holds an AccountKey or SharedAccessSignature \
                     (value not shown): remove it, or use --auth-mode key"
                        .into(),
                ));
            }
            (Some(key), None) => {
                let name = self
                    .account_name
                    .as_deref()
                    .ok_or(ConfigError::MissingAccountName)?;
                Credential::SharedKey(SharedKeyCredential::from_base64(name, key)?)
            }
            (None, Some(sas)) => Credential::Sas(SasToken::parse(sas)?),
            (None, None) => token.ok_or(ConfigError::MissingCredential)?,
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

/// The variable every account setting falls back to.
pub const FALLBACK_ENV: &str = "AZURE_STORAGE_CONNECTION_STRING";

/// How an account setting is named to the user, for messages such as "no source account:
/// pass --source or set TABLEVAULT_SOURCE".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountSetting {
    /// What the account is for (`source`, `backup`, `target`).
    pub what: &'static str,
    /// The command-line option.
    pub flag: &'static str,
    /// The environment variable read for the option.
    pub env: &'static str,
}

impl StorageAccount {
    /// The account an option names (the option already holds its own environment
    /// variable, if set), with the process's authentication settings
    /// ([`AuthConfig::process`]: those installed by the binary, else the environment).
    /// See [`StorageAccount::resolve_with`].
    pub fn resolve(given: Option<&str>, setting: AccountSetting) -> Result<Self, ConfigError> {
        Self::resolve_with(given, setting, &AuthConfig::process()?)
    }
}

/// A connection-string key or value nobody defines, as an error may show it: quoted as
/// written where it could be a name (a typo, `AcountKey`; `ftp`), otherwise only its
/// length. A secret pasted without its `AccountKey=` reads as a key up to its base64
/// padding's `=`, and was printed in full.
fn shown_name(key: &str) -> String {
    let plausible = key.len() <= 40 && key.chars().all(|c| c.is_ascii_alphanumeric());
    if plausible {
        format!("{key:?}")
    } else {
        format!(
            "of {} characters, not shown (a key or signature pasted without its name?)",
            key.chars().count()
        )
    }
}

#[cfg(test)]
mod tests;
