//! Builds the `azure_identity` credential of each kind, with our HTTP transport and the
//! configured authority host, and a description of it for logs and errors (ids only).

use std::sync::Arc;

use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::credentials::TokenCredential;
use azure_core::http::ClientOptions;
use azure_identity::{
    AzureCliCredential, AzureCliCredentialOptions, ClientAssertionCredentialOptions,
    ClientSecretCredential, ClientSecretCredentialOptions, ManagedIdentityCredential,
    ManagedIdentityCredentialOptions, UserAssignedId, WorkloadIdentityCredential,
    WorkloadIdentityCredentialOptions,
};

use super::cli_process::{AZ_LIMIT, GroupExecutor};
use super::select::{Surroundings, choose};
use super::transport::{LastFailure, ReqwestTransport};
use super::{IdentityConfig, IdentityKind, ManagedIdentityId};
use crate::config::ConfigError;

fn fail(msg: impl Into<String>) -> ConfigError {
    ConfigError::NotConfigured(msg.into())
}

fn need<'a>(
    value: &'a Option<String>,
    var: &str,
    kind: IdentityKind,
) -> Result<&'a str, ConfigError> {
    value
        .as_deref()
        .ok_or_else(|| fail(format!("identity {kind} needs {var}")))
}

/// Options every credential gets: our transport, and the authority host if one is set.
fn client_options(
    config: &IdentityConfig,
    last_failure: &LastFailure,
) -> Result<ClientOptions, ConfigError> {
    let mut options = ClientOptions {
        transport: Some(ReqwestTransport::shared(last_failure.clone())?),
        ..ClientOptions::default()
    };
    if let Some(host) = &config.authority_host {
        let url = url::Url::parse(host)
            .map_err(|e| fail(format!("AZURE_AUTHORITY_HOST is not a URL: {e}")))?;
        if url.scheme() != "https" {
            return Err(fail("AZURE_AUTHORITY_HOST must be an https URL"));
        }
        let mut custom = CustomConfiguration::default();
        custom.authority_host = host.trim_end_matches('/').to_string();
        options.cloud = Some(Arc::new(CloudConfiguration::Custom(custom)));
    }
    Ok(options)
}

/// Turns an `azure_core` error into a configuration error; it names settings, not secrets.
fn sdk(kind: IdentityKind) -> impl Fn(azure_core::Error) -> ConfigError {
    move |e| {
        fail(format!(
            "cannot set up identity {kind}: {}",
            crate::redact::redact_text(&e.to_string())
        ))
    }
}

/// The credential for `config`, a description of it, and where its transport notes why
/// its last token request got no answer.
pub(super) fn credential(
    config: &IdentityConfig,
) -> Result<(Arc<dyn TokenCredential>, String, LastFailure), ConfigError> {
    let (kind, why) = choose(config, Surroundings::look());
    let last_failure = LastFailure::default();
    let options = client_options(config, &last_failure)?;
    let (credential, who): (Arc<dyn TokenCredential>, String) = match kind {
        IdentityKind::Workload => {
            let client_id = need(&config.client_id, "AZURE_CLIENT_ID", kind)?;
            let tenant_id = need(&config.tenant_id, "AZURE_TENANT_ID", kind)?;
            let file = config
                .federated_token_file
                .clone()
                .ok_or_else(|| fail("identity workload needs AZURE_FEDERATED_TOKEN_FILE"))?;
            let c = WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
                credential_options: ClientAssertionCredentialOptions {
                    client_options: options,
                },
                client_id: Some(client_id.to_string()),
                tenant_id: Some(tenant_id.to_string()),
                token_file_path: Some(file),
            }))
            .map_err(sdk(kind))?;
            (
                c,
                format!("workload identity (client id {client_id}, tenant {tenant_id})"),
            )
        }
        IdentityKind::ClientSecret => {
            let client_id = need(&config.client_id, "AZURE_CLIENT_ID", kind)?;
            let tenant_id = need(&config.tenant_id, "AZURE_TENANT_ID", kind)?;
            let secret = config
                .client_secret
                .as_ref()
                .ok_or_else(|| fail("identity client-secret needs AZURE_CLIENT_SECRET"))?;
            let c = ClientSecretCredential::new(
                tenant_id,
                client_id.to_string(),
                secret.expose().clone().into(),
                Some(ClientSecretCredentialOptions {
                    client_options: options,
                }),
            )
            .map_err(sdk(kind))?;
            (
                c,
                format!(
                    "service principal with client secret (client id {client_id}, tenant {tenant_id})"
                ),
            )
        }
        IdentityKind::ClientCertificate => certificate(config, options)?,
        IdentityKind::Managed => {
            // Like the Azure SDKs' default chain: AZURE_CLIENT_ID names a user-assigned
            // identity when no id is given.
            let id = config
                .managed_identity
                .clone()
                .or_else(|| config.client_id.clone().map(ManagedIdentityId::ClientId));
            let user_assigned_id = id.as_ref().map(|id| match id {
                ManagedIdentityId::ClientId(s) => UserAssignedId::ClientId(s.clone()),
                ManagedIdentityId::ObjectId(s) => UserAssignedId::ObjectId(s.clone()),
                ManagedIdentityId::ResourceId(s) => UserAssignedId::ResourceId(s.clone()),
            });
            let c = ManagedIdentityCredential::new(Some(ManagedIdentityCredentialOptions {
                user_assigned_id,
                client_options: options,
            }))
            .map_err(sdk(kind))?;
            let who = match id {
                Some(id) => format!("managed identity (user-assigned, {id})"),
                None => "managed identity (system-assigned)".to_string(),
            };
            (c, who)
        }
        IdentityKind::AzureCli => {
            let c = AzureCliCredential::new(Some(AzureCliCredentialOptions {
                executor: Some(Arc::new(GroupExecutor { limit: AZ_LIMIT })),
                ..AzureCliCredentialOptions::default()
            }))
            .map_err(sdk(kind))?;
            (
                c,
                "Azure CLI signed-in account (az account get-access-token)".to_string(),
            )
        }
        IdentityKind::Auto => unreachable!("choose resolves auto"),
    };
    Ok((credential, format!("{who} [{why}]"), last_failure))
}

#[cfg(feature = "client-certificate")]
fn certificate(
    config: &IdentityConfig,
    options: ClientOptions,
) -> Result<(Arc<dyn TokenCredential>, String), ConfigError> {
    use azure_identity::{ClientCertificateCredential, ClientCertificateCredentialOptions};
    let kind = IdentityKind::ClientCertificate;
    let client_id = need(&config.client_id, "AZURE_CLIENT_ID", kind)?;
    let tenant_id = need(&config.tenant_id, "AZURE_TENANT_ID", kind)?;
    let path = config
        .certificate_path
        .as_ref()
        .ok_or_else(|| fail("identity client-certificate needs AZURE_CLIENT_CERTIFICATE_PATH"))?;
    let bytes = std::fs::read(path).map_err(|e| {
        fail(format!(
            "cannot read AZURE_CLIENT_CERTIFICATE_PATH ({}): {e}",
            path.display()
        ))
    })?;
    let c = ClientCertificateCredential::new(
        tenant_id.to_string(),
        client_id.to_string(),
        azure_core::credentials::SecretBytes::new(bytes),
        Some(ClientCertificateCredentialOptions {
            client_options: options,
            password: config
                .certificate_password
                .as_ref()
                .map(|p| p.expose().clone().into()),
        }),
    )
    .map_err(sdk(kind))?;
    Ok((
        c,
        format!("service principal with certificate (client id {client_id}, tenant {tenant_id})"),
    ))
}

#[cfg(not(feature = "client-certificate"))]
fn certificate(
    _config: &IdentityConfig,
    _options: ClientOptions,
) -> Result<(Arc<dyn TokenCredential>, String), ConfigError> {
    Err(fail(
        "identity client-certificate is not in this build: rebuild with \
         `--features tablevault-azure/client-certificate` (needs OpenSSL: libssl-dev), or use \
         client-secret, workload or managed identity",
    ))
}
