//! The authentication flags both binaries take (`--auth-mode`, `--identity`, user-assigned
//! managed identity ids), following the Azure CLI's `--auth-mode key|login`. They become
//! the process's [`AuthConfig`], which every account setting is resolved with.

use tablevault_azure::ConfigError;
use tablevault_azure::config::{AuthConfig, AuthMode};
use tablevault_azure::identity::{IdentityKind, ManagedIdentityId};

/// `--auth-mode` and the identity used with `login`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AuthArgs {
    /// How to authenticate to storage. `key`: what each connection string holds (account
    /// key or SAS). `login`: Microsoft Entra ID tokens of the identity chosen with
    /// --identity; account settings may then also be an account URL
    /// (`https://NAME.blob.core.windows.net`, or its queue/table/dfs endpoint), a bare account
    /// name, or a connection string without a key (AccountName=...;EndpointSuffix=...).
    /// Falls back to AZURE_STORAGE_AUTH_MODE, then key. Extra CA certificates (PEM) to
    /// trust, e.g. behind a TLS-inspecting proxy: TABLEVAULT_CA_CERT=/path.pem.
    #[arg(long, env = "TABLEVAULT_AUTH_MODE", global = true, value_name = "key|login", value_parser = parse_mode)]
    pub auth_mode: Option<AuthMode>,
    /// Identity for --auth-mode login: auto, workload (AKS: AZURE_CLIENT_ID,
    /// AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE), managed (system-assigned, or
    /// user-assigned with --managed-identity-* or AZURE_CLIENT_ID), client-secret
    /// (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET), client-certificate (also
    /// AZURE_CLIENT_CERTIFICATE_PATH, a .pfx; only in builds with the client-certificate
    /// feature) or azure-cli (`az login`). AZURE_AUTHORITY_HOST sets the login endpoint.
    /// The auto choice: AZURE_FEDERATED_TOKEN_FILE set → workload; AZURE_CLIENT_SECRET set
    /// → client-secret; AZURE_CLIENT_CERTIFICATE_PATH set → client-certificate; a managed
    /// identity id given, IDENTITY_ENDPOINT and IDENTITY_HEADER set, or an Azure VM → managed;
    /// `az` on PATH → azure-cli; otherwise managed.
    #[arg(long, env = "TABLEVAULT_IDENTITY", global = true, value_name = "KIND", value_parser = parse_identity)]
    pub identity: Option<IdentityKind>,
    /// User-assigned managed identity, by client id.
    #[arg(
        long,
        env = "TABLEVAULT_MANAGED_IDENTITY_CLIENT_ID",
        global = true,
        value_name = "ID"
    )]
    pub managed_identity_client_id: Option<String>,
    /// User-assigned managed identity, by object (principal) id.
    #[arg(
        long,
        env = "TABLEVAULT_MANAGED_IDENTITY_OBJECT_ID",
        global = true,
        value_name = "ID",
        conflicts_with = "managed_identity_client_id"
    )]
    pub managed_identity_object_id: Option<String>,
    /// User-assigned managed identity, by Azure resource id.
    #[arg(long, env = "TABLEVAULT_MANAGED_IDENTITY_RESOURCE_ID", global = true, value_name = "ID", conflicts_with_all = ["managed_identity_client_id", "managed_identity_object_id"])]
    pub managed_identity_resource_id: Option<String>,
}

fn parse_mode(s: &str) -> Result<AuthMode, String> {
    s.parse()
}

fn parse_identity(s: &str) -> Result<IdentityKind, String> {
    s.parse()
}

impl AuthArgs {
    /// The settings these flags (and the environment) describe.
    pub fn config(&self) -> Result<AuthConfig, ConfigError> {
        let managed = self
            .managed_identity_client_id
            .clone()
            .map(ManagedIdentityId::ClientId)
            .or_else(|| {
                self.managed_identity_object_id
                    .clone()
                    .map(ManagedIdentityId::ObjectId)
            })
            .or_else(|| {
                self.managed_identity_resource_id
                    .clone()
                    .map(ManagedIdentityId::ResourceId)
            });
        AuthConfig::from_parts(self.auth_mode, self.identity, managed)
    }

    /// Makes them the process's settings; call once, before resolving any account.
    pub fn install(&self) -> Result<(), ConfigError> {
        self.config()?.install();
        Ok(())
    }
}
