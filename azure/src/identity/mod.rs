//! Microsoft Entra ID authentication: which identity the process runs as (chosen
//! explicitly, or by [`IdentityKind::Auto`] from the environment), built with Microsoft's
//! `azure_identity` credentials over our own HTTP client, behind one process-wide
//! [`TokenCache`] per identity that every storage client shares.
//!
//! * `select`: the explicit kinds and the `auto` rule.
//! * `build`: the `azure_identity` credential of each kind.
//! * `cache`: the token cache (refresh before expiry, single flight).
//! * `cli_process`: the Azure CLI run in a process group of its own, stopped when it
//!   does not answer or its request gives up.
//! * `claims`: the identity's names read from a token, for messages.
//! * `refusal`: what a 401/403 to a bearer token means (which role is missing).
//! * `transport`: `azure_core`'s HTTP client trait over our reqwest client.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};

use crate::config::ConfigError;
use crate::redact::Secret;

mod build;
mod cache;
mod claims;
mod cli_process;
mod misconfigured;
mod refusal;
mod select;
mod transport;

pub use cache::{Clock, EXPIRY_SKEW, REFRESH_BEFORE, TokenCache};
pub use claims::Claims;
pub use misconfigured::misconfigured;
pub(crate) use refusal::Refusal;
pub use refusal::required_role;
pub use select::{AUTO_RULE, IdentityKind};

/// The scope of Azure Storage tokens (all three services, every account).
pub const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";

/// A user-assigned managed identity, named one of three ways.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ManagedIdentityId {
    /// Its client (application) id.
    ClientId(String),
    /// Its object (principal) id.
    ObjectId(String),
    /// Its Azure resource id (`/subscriptions/…/userAssignedIdentities/NAME`).
    ResourceId(String),
}

impl fmt::Display for ManagedIdentityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManagedIdentityId::ClientId(id) => write!(f, "client id {id}"),
            ManagedIdentityId::ObjectId(id) => write!(f, "object id {id}"),
            ManagedIdentityId::ResourceId(id) => write!(f, "resource id {id}"),
        }
    }
}

/// Everything needed to build a credential: the kind and the settings the Azure SDKs read
/// from `AZURE_*` variables. Secrets are [`Secret`]s; `Debug` never shows them.
#[derive(Debug, Clone, Default)]
pub struct IdentityConfig {
    /// Which credential.
    pub kind: IdentityKind,
    /// `AZURE_CLIENT_ID`: the application (client) id.
    pub client_id: Option<String>,
    /// `AZURE_TENANT_ID`.
    pub tenant_id: Option<String>,
    /// `AZURE_AUTHORITY_HOST` (https only); default `https://login.microsoftonline.com`.
    pub authority_host: Option<String>,
    /// `AZURE_FEDERATED_TOKEN_FILE`: the Kubernetes service account token (workload identity).
    pub federated_token_file: Option<PathBuf>,
    /// `AZURE_CLIENT_SECRET`.
    pub client_secret: Option<Secret<String>>,
    /// `AZURE_CLIENT_CERTIFICATE_PATH`: a PKCS#12 (.pfx) file with an RSA key.
    pub certificate_path: Option<PathBuf>,
    /// `AZURE_CLIENT_CERTIFICATE_PASSWORD`.
    pub certificate_password: Option<Secret<String>>,
    /// A user-assigned managed identity; none means system-assigned (or `AZURE_CLIENT_ID`).
    pub managed_identity: Option<ManagedIdentityId>,
    /// Whether `IDENTITY_ENDPOINT` and `IDENTITY_HEADER` are set (App Service, Functions,
    /// Container Apps): a managed identity the managed credential can reach is at hand.
    pub managed_endpoint: bool,
}

/// Reads a variable, treating empty as unset.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl IdentityConfig {
    /// The settings of the `AZURE_*` variables the Azure SDKs and CLI read, with `kind`.
    pub fn from_env(kind: IdentityKind) -> Self {
        Self::from_vars(kind, var)
    }

    /// As [`IdentityConfig::from_env`], reading variables through `get` (tests).
    pub fn from_vars(kind: IdentityKind, get: impl Fn(&str) -> Option<String>) -> Self {
        IdentityConfig {
            kind,
            client_id: get("AZURE_CLIENT_ID"),
            tenant_id: get("AZURE_TENANT_ID"),
            authority_host: get("AZURE_AUTHORITY_HOST"),
            federated_token_file: get("AZURE_FEDERATED_TOKEN_FILE").map(PathBuf::from),
            client_secret: get("AZURE_CLIENT_SECRET").map(Secret::new),
            certificate_path: get("AZURE_CLIENT_CERTIFICATE_PATH").map(PathBuf::from),
            certificate_password: get("AZURE_CLIENT_CERTIFICATE_PASSWORD").map(Secret::new),
            managed_identity: None,
            // Only the endpoint the managed credential speaks to: App Service's and
            // Container Apps' pair. `MSI_ENDPOINT` (Cloud Shell, Azure ML), Arc's
            // `IMDS_ENDPOINT` and Service Fabric's thumbprint are other protocols, and
            // `auto` chose a managed identity there that could never answer, where a
            // signed-in `az` would have.
            managed_endpoint: get("IDENTITY_ENDPOINT").is_some()
                && get("IDENTITY_HEADER").is_some()
                && get("IMDS_ENDPOINT").is_none()
                && get("IDENTITY_SERVER_THUMBPRINT").is_none(),
        }
    }

    /// A key that tells identities apart (secrets enter only as a hash), so that every
    /// account using the same identity shares one cache.
    fn cache_key(&self) -> String {
        let hash = |s: &Option<Secret<String>>| {
            s.as_ref().map(|s| {
                let d = Sha256::digest(s.expose().as_bytes());
                d.iter()
                    .take(8)
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            })
        };
        format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{}",
            self.kind,
            self.client_id,
            self.tenant_id,
            self.authority_host,
            self.federated_token_file,
            hash(&self.client_secret),
            self.certificate_path,
            hash(&self.certificate_password),
            self.managed_identity,
            self.managed_endpoint
        )
    }
}

/// The process's token cache for an identity, built on first use: every client of every
/// account and service that uses the same identity shares it (one token per scope).
pub fn shared_token_cache(config: &IdentityConfig) -> Result<Arc<TokenCache>, ConfigError> {
    static CACHES: OnceLock<Mutex<HashMap<String, Arc<TokenCache>>>> = OnceLock::new();
    let key = config.cache_key();
    let mut caches = CACHES.get_or_init(Default::default).lock().expect("caches");
    if let Some(c) = caches.get(&key) {
        return Ok(c.clone());
    }
    let (credential, identity, last_failure) = build::credential(config)?;
    tracing::info!(identity = %identity, "Microsoft Entra ID authentication");
    let cache = Arc::new(
        TokenCache::new(credential, STORAGE_SCOPE, identity).with_last_failure(last_failure),
    );
    caches.insert(key, cache.clone());
    Ok(cache)
}
