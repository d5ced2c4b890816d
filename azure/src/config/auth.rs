//! How accounts authenticate, following the Azure CLI and AzCopy: auth mode `key` (what
//! the connection string holds: account key or SAS) or `login` (Microsoft Entra ID, with
//! an identity from [`crate::identity`]). In login mode an account setting may also be an
//! account URL, a bare account name, or a connection string without a key; with no
//! setting at all, `AZURE_STORAGE_ACCOUNT` (with `AZURE_STORAGE_KEY` or
//! `AZURE_STORAGE_SAS_TOKEN` in key mode) is the last fallback, as for the Azure CLI.

use std::str::FromStr;
use std::sync::OnceLock;

use url::Url;

use super::{AccountSetting, ConfigError, ConnectionString, FALLBACK_ENV, StorageAccount};
use super::{account_name_from_endpoint, parse_endpoint};
use crate::credential::Credential;
use crate::identity::{IdentityConfig, IdentityKind, ManagedIdentityId, shared_token_cache};
use crate::service::Service;

/// `key` or `login`, like `az storage --auth-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// What each connection string holds: an account key or a SAS.
    #[default]
    Key,
    /// Microsoft Entra ID bearer tokens for every account.
    Login,
}

impl FromStr for AuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "key" => Ok(AuthMode::Key),
            "login" => Ok(AuthMode::Login),
            other => Err(format!(
                "unknown auth mode {other:?}; expected key or login"
            )),
        }
    }
}

/// The authentication settings of a process: the mode and, for login, the identity.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Key or login.
    pub mode: AuthMode,
    /// The identity used in login mode.
    pub identity: IdentityConfig,
}

/// Environment variables of the auth settings (the command-line flags read them too).
pub mod env {
    /// `key` or `login`.
    pub const AUTH_MODE: &str = "TABLEVAULT_AUTH_MODE";
    /// The Azure CLI's variable for the same, honoured when ours is unset.
    pub const AZURE_AUTH_MODE: &str = "AZURE_STORAGE_AUTH_MODE";
    /// Which identity (`auto`, `workload`, ...).
    pub const IDENTITY: &str = "TABLEVAULT_IDENTITY";
    /// User-assigned managed identity by client id.
    pub const MI_CLIENT_ID: &str = "TABLEVAULT_MANAGED_IDENTITY_CLIENT_ID";
    /// User-assigned managed identity by object id.
    pub const MI_OBJECT_ID: &str = "TABLEVAULT_MANAGED_IDENTITY_OBJECT_ID";
    /// User-assigned managed identity by resource id.
    pub const MI_RESOURCE_ID: &str = "TABLEVAULT_MANAGED_IDENTITY_RESOURCE_ID";
    /// Last-resort account name (Azure CLI convention).
    pub const ACCOUNT: &str = "AZURE_STORAGE_ACCOUNT";
    /// Its key, in key mode.
    pub const KEY: &str = "AZURE_STORAGE_KEY";
    /// Or its SAS, in key mode.
    pub const SAS: &str = "AZURE_STORAGE_SAS_TOKEN";
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

static INSTALLED: OnceLock<AuthConfig> = OnceLock::new();

impl AuthConfig {
    /// Key mode.
    pub fn key() -> Self {
        AuthConfig::default()
    }

    /// Login mode with an identity.
    pub fn login(identity: IdentityConfig) -> Self {
        AuthConfig {
            mode: AuthMode::Login,
            identity,
        }
    }

    /// From the command line's values (each `None` falls back to its variable) and the
    /// `AZURE_*` identity variables.
    pub fn from_parts(
        mode: Option<AuthMode>,
        identity: Option<IdentityKind>,
        managed_identity: Option<ManagedIdentityId>,
    ) -> Result<Self, ConfigError> {
        let bad = |what: &str, e: String| ConfigError::NotConfigured(format!("{what}: {e}"));
        let mode = match mode {
            Some(m) => m,
            // The variable the value came from is the one named in an error: the Azure
            // CLI's `AZURE_STORAGE_AUTH_MODE=bogus` was reported as ours.
            None => match var(env::AUTH_MODE)
                .map(|v| (env::AUTH_MODE, v))
                .or_else(|| var(env::AZURE_AUTH_MODE).map(|v| (env::AZURE_AUTH_MODE, v)))
            {
                Some((name, v)) => v.parse().map_err(|e| bad(name, e))?,
                None => AuthMode::Key,
            },
        };
        let kind = match identity {
            Some(k) => k,
            None => match var(env::IDENTITY) {
                Some(v) => v.parse().map_err(|e| bad(env::IDENTITY, e))?,
                None => IdentityKind::Auto,
            },
        };
        let managed = managed_identity.or_else(|| {
            var(env::MI_CLIENT_ID)
                .map(ManagedIdentityId::ClientId)
                .or_else(|| var(env::MI_OBJECT_ID).map(ManagedIdentityId::ObjectId))
                .or_else(|| var(env::MI_RESOURCE_ID).map(ManagedIdentityId::ResourceId))
        });
        let mut identity = IdentityConfig::from_env(kind);
        identity.managed_identity = managed;
        Ok(AuthConfig { mode, identity })
    }

    /// The settings of the environment alone.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_parts(None, None, None)
    }

    /// Makes these the process's settings, used by [`StorageAccount::resolve`]. The
    /// binaries call this once after parsing their flags; later calls are ignored.
    pub fn install(self) {
        let _ = INSTALLED.set(self);
    }

    /// The installed settings, or those of the environment.
    pub fn process() -> Result<Self, ConfigError> {
        match INSTALLED.get() {
            Some(c) => Ok(c.clone()),
            None => Self::from_env(),
        }
    }

    fn token_credential(&self) -> Result<Credential, ConfigError> {
        Ok(Credential::Token(shared_token_cache(&self.identity)?))
    }
}

/// Whether any fallback account setting is present (`AZURE_STORAGE_CONNECTION_STRING` or
/// `AZURE_STORAGE_ACCOUNT`), for settings that are optional.
pub fn fallback_configured() -> bool {
    var(FALLBACK_ENV).is_some() || var(env::ACCOUNT).is_some()
}

const ACCOUNT_FORMS: &str =
    "a connection string, or with --auth-mode login an account URL or account name";

impl StorageAccount {
    /// The account an option names (the option already holds its own environment
    /// variable, if set), falling back to `AZURE_STORAGE_CONNECTION_STRING`, then to
    /// `AZURE_STORAGE_ACCOUNT`. Errors say how to give the setting and never echo a secret.
    pub fn resolve_with(
        given: Option<&str>,
        setting: AccountSetting,
        auth: &AuthConfig,
    ) -> Result<Self, ConfigError> {
        let invalid = |e: ConfigError| {
            ConfigError::NotConfigured(format!(
                "the {} account setting is invalid: {e}",
                setting.what
            ))
        };
        if auth.mode == AuthMode::Login {
            // An unusable identity is not the account setting's fault: say so first.
            auth.token_credential()
                .map_err(|e| ConfigError::NotConfigured(format!("--auth-mode login: {e}")))?;
        }
        let fallback = var(FALLBACK_ENV);
        if let Some(text) = given.or(fallback.as_deref()) {
            return Self::from_setting(text, auth).map_err(invalid);
        }
        if let Some(name) = var(env::ACCOUNT) {
            return Self::from_account_env(&name, auth).map_err(invalid);
        }
        Err(ConfigError::NotConfigured(format!(
            "no {} account: pass {} <CONNECTION_STRING> or set {} or {FALLBACK_ENV} \
             ({ACCOUNT_FORMS}; or {} with {} in key mode)",
            setting.what,
            setting.flag,
            setting.env,
            env::ACCOUNT,
            env::KEY
        )))
    }

    /// One account setting: a connection string, an account URL or an account name.
    pub fn from_setting(text: &str, auth: &AuthConfig) -> Result<Self, ConfigError> {
        let text = text.trim();
        let token = match auth.mode {
            AuthMode::Login => Some(auth.token_credential()?),
            AuthMode::Key => None,
        };
        let account = if text.contains('=') {
            ConnectionString::parse(text)?.into_account(token)?
        } else {
            let Some(token) = token else {
                return Err(ConfigError::NotConfigured(
                    "an account URL or name needs --auth-mode login (Microsoft Entra ID); in key mode \
                     give a connection string with AccountKey or SharedAccessSignature"
                        .into(),
                ));
            };
            let (name, endpoints) = if text.contains("://") {
                endpoints_from_url(text)?
            } else {
                endpoints_from_name(text)?
            };
            let mut a = StorageAccount::on_public_cloud(&name, token);
            a.blob = Some(endpoints[0].clone());
            a.queue = Some(endpoints[1].clone());
            a.table = Some(endpoints[2].clone());
            a
        };
        if auth.mode == AuthMode::Login {
            require_https(&account)?;
        }
        Ok(account)
    }

    fn from_account_env(name: &str, auth: &AuthConfig) -> Result<Self, ConfigError> {
        match auth.mode {
            AuthMode::Login => Self::from_setting(name, auth),
            AuthMode::Key => match (var(env::KEY), var(env::SAS)) {
                (Some(key), _) => StorageAccount::from_key(name, &key),
                (None, Some(sas)) => StorageAccount::from_sas(name, &sas),
                (None, None) => Err(ConfigError::NotConfigured(format!(
                    "{} is set but neither {} nor {}; set one, or use --auth-mode login",
                    env::ACCOUNT,
                    env::KEY,
                    env::SAS
                ))),
            },
        }
    }
}

/// Bearer tokens go only over https (the service and Azurite refuse them over http).
fn require_https(account: &StorageAccount) -> Result<(), ConfigError> {
    for svc in [Service::Blob, Service::Queue, Service::Table] {
        if let Ok(u) = account.endpoint(svc)
            && u.scheme() != "https"
        {
            return Err(ConfigError::InvalidEndpoint {
                key: svc.key().to_string(),
                reason: "Microsoft Entra ID tokens are only sent over https".into(),
            });
        }
    }
    Ok(())
}

/// A storage account name: 3 to 24 lower-case letters and digits.
fn endpoints_from_name(name: &str) -> Result<(String, [Url; 3]), ConfigError> {
    let ok = (3..=24).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !ok {
        return Err(ConfigError::NotConfigured(format!(
            "{name:?} is not a storage account name (3-24 lower-case letters and digits); \
             give {ACCOUNT_FORMS}"
        )));
    }
    endpoints_from_url(&format!("https://{name}.blob.core.windows.net"))
}

/// Host labels that name a service in `NAME.SERVICE.SUFFIX`.
const SERVICE_LABELS: &[&str] = &["blob", "queue", "table", "dfs", "file", "web"];

/// The three endpoints of the account an endpoint URL belongs to: `NAME.SERVICE.SUFFIX`
/// hosts get the other service labels; path-style emulator URLs
/// (`https://127.0.0.1:10000/devstoreaccount1`) the emulator's other default ports.
fn endpoints_from_url(text: &str) -> Result<(String, [Url; 3]), ConfigError> {
    let url = parse_endpoint("the account URL", text)?;
    let cannot = |why: &str| {
        ConfigError::NotConfigured(format!(
            "cannot tell the blob, queue and table endpoints from {url} ({why}); give a \
             connection string with BlobEndpoint=...;QueueEndpoint=...;TableEndpoint=... instead"
        ))
    };
    let build = |f: &dyn Fn(Service) -> String| -> Result<[Url; 3], ConfigError> {
        let one = |s: Service| parse_endpoint(s.key(), &f(s));
        Ok([
            one(Service::Blob)?,
            one(Service::Queue)?,
            one(Service::Table)?,
        ])
    };
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    if let Some(url::Host::Domain(host)) = url.host()
        && host != "localhost"
    {
        let labels: Vec<&str> = host.split('.').collect();
        if labels.len() < 3 || !SERVICE_LABELS.contains(&labels[1]) {
            return Err(cannot("its host is not ACCOUNT.SERVICE.SUFFIX"));
        }
        if !url.path().trim_matches('/').is_empty() {
            return Err(cannot("it has a path; give the account URL only"));
        }
        let (name, suffix) = (labels[0], labels[2..].join("."));
        let scheme = url.scheme();
        let endpoints = build(&|s| format!("{scheme}://{name}.{}.{suffix}{port}", s.subdomain()))?;
        return Ok((name.to_string(), endpoints));
    }
    // Path-style: an IP address or localhost, the account in the first path segment.
    let name = account_name_from_endpoint(&url).ok_or_else(|| cannot("no account in its path"))?;
    let Some(p) = url.port() else {
        return Err(cannot("it has no port"));
    };
    let default_ports = [Service::Blob, Service::Queue, Service::Table].map(Service::emulator_port);
    if !default_ports.contains(&p) {
        return Err(cannot(
            "its port is not one of the emulator's default ports",
        ));
    }
    let host = url.host_str().unwrap_or_default();
    let scheme = url.scheme();
    let endpoints = build(&|s| format!("{scheme}://{host}:{}/{name}", s.emulator_port()))?;
    Ok((name, endpoints))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::Secret;

    const SETTING: AccountSetting = AccountSetting {
        what: "source",
        flag: "--source",
        env: "TABLEVAULT_SOURCE",
    };

    fn login() -> AuthConfig {
        AuthConfig::login(IdentityConfig {
            kind: IdentityKind::ClientSecret,
            client_id: Some("00000000-0000-0000-0000-000000000001".into()),
            tenant_id: Some("00000000-0000-0000-0000-000000000002".into()),
            client_secret: Some(Secret::new("hunter2-secret".into())),
            ..Default::default()
        })
    }

    fn eps(a: &StorageAccount) -> [String; 3] {
        [Service::Blob, Service::Queue, Service::Table].map(|s| crate::config::tests::ep(a, s))
    }

    #[test]
    fn login_accepts_urls_names_and_keyless_connection_strings() {
        let cases: &[(&str, &str, [&str; 3])] = &[
            (
                "https://acct.blob.core.windows.net/",
                "acct",
                [
                    "https://acct.blob.core.windows.net",
                    "https://acct.queue.core.windows.net",
                    "https://acct.table.core.windows.net",
                ],
            ),
            (
                "https://acct.dfs.core.chinacloudapi.cn",
                "acct",
                [
                    "https://acct.blob.core.chinacloudapi.cn",
                    "https://acct.queue.core.chinacloudapi.cn",
                    "https://acct.table.core.chinacloudapi.cn",
                ],
            ),
            (
                "acct",
                "acct",
                [
                    "https://acct.blob.core.windows.net",
                    "https://acct.queue.core.windows.net",
                    "https://acct.table.core.windows.net",
                ],
            ),
            (
                "https://127.0.0.1:10002/devstoreaccount1",
                "devstoreaccount1",
                [
                    "https://127.0.0.1:10000/devstoreaccount1",
                    "https://127.0.0.1:10001/devstoreaccount1",
                    "https://127.0.0.1:10002/devstoreaccount1",
                ],
            ),
            (
                "AccountName=acct;EndpointSuffix=core.usgovcloudapi.net",
                "acct",
                [
                    "https://acct.blob.core.usgovcloudapi.net",
                    "https://acct.queue.core.usgovcloudapi.net",
                    "https://acct.table.core.usgovcloudapi.net",
                ],
            ),
            (
                "BlobEndpoint=https://localhost:1/a;QueueEndpoint=https://localhost:2/a;TableEndpoint=https://localhost:3/a",
                "a",
                [
                    "https://localhost:1/a",
                    "https://localhost:2/a",
                    "https://localhost:3/a",
                ],
            ),
        ];
        for (text, name, want) in cases {
            let a = StorageAccount::resolve_with(Some(text), SETTING, &login())
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(a.name(), *name, "{text}");
            assert_eq!(eps(&a), want.map(str::to_string), "{text}");
            assert!(matches!(a.credential(), Credential::Token(_)), "{text}");
        }
    }

    #[test]
    fn refusals_are_clear_and_never_echo_secrets() {
        let key = "AccountName=acct;AccountKey=c2VjcmV0a2V5c2VjcmV0";
        let cases: &[(&str, &AuthConfig, &str)] = &[
            (key, &login(), "remove it, or use --auth-mode key"),
            (
                "UseDevelopmentStorage=true",
                &login(),
                "UseDevelopmentStorage=true",
            ),
            (
                "DefaultEndpointsProtocol=http;AccountName=acct",
                &login(),
                "only sent over https",
            ),
            (
                "https://example.com",
                &login(),
                "not ACCOUNT.SERVICE.SUFFIX",
            ),
            (
                "https://acct.blob.core.windows.net/container",
                &login(),
                "has a path",
            ),
            ("https://127.0.0.1:4567/acct", &login(), "default ports"),
            ("Not_An_Account", &login(), "not a storage account name"),
            ("acct", &AuthConfig::key(), "needs --auth-mode login"),
            (
                "AccountName=acct",
                &AuthConfig::key(),
                "use --auth-mode login",
            ),
        ];
        for (text, auth, want) in cases {
            let e = StorageAccount::resolve_with(Some(text), SETTING, auth)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(e.contains("source account"), "{text}: {e}");
            assert!(!e.contains("c2VjcmV0") && !e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn one_identity_shares_one_token_cache_across_accounts() {
        let a = StorageAccount::resolve_with(Some("accta"), SETTING, &login()).unwrap();
        let b = StorageAccount::resolve_with(Some("acctb"), SETTING, &login()).unwrap();
        let (Credential::Token(x), Credential::Token(y)) = (a.credential(), b.credential()) else {
            panic!("token credentials expected");
        };
        assert!(std::ptr::addr_eq(
            std::sync::Arc::as_ptr(x),
            std::sync::Arc::as_ptr(y)
        ));
        let debug = format!("{a:?} {:?}", login());
        assert!(!debug.contains("hunter2"), "{debug}");
    }

    #[test]
    fn modes_parse() {
        assert_eq!("LOGIN".parse::<AuthMode>().unwrap(), AuthMode::Login);
        assert!(
            "oauth"
                .parse::<AuthMode>()
                .unwrap_err()
                .contains("key or login")
        );
    }
}
