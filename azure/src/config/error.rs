//! Why an account description was rejected: each variant names the offending part (a
//! key, a segment, an endpoint) and none ever carries a secret value.

use crate::credential::CredentialError;

use crate::service::Service;

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
        "connection string has unknown key {key}; known keys are DefaultEndpointsProtocol, AccountName, \
         AccountKey, EndpointSuffix, BlobEndpoint, QueueEndpoint, TableEndpoint, FileEndpoint, \
         SharedAccessSignature, UseDevelopmentStorage, DevelopmentStorageProxyUri"
    )]
    UnknownKey {
        /// The key, quoted as written where it could be a key name; otherwise its
        /// length only (a secret pasted without its name reads as a key).
        key: String,
    },
    /// A value is present but empty.
    #[error("connection string key {key} has an empty value")]
    EmptyValue {
        /// The key.
        key: String,
    },
    /// The key or SAS is unusable. The value is not shown.
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// `DefaultEndpointsProtocol` is not http or https.
    #[error("DefaultEndpointsProtocol must be http or https, not {0}")]
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
    #[error(
        "connection string has neither AccountKey nor SharedAccessSignature (for Microsoft Entra ID, use --auth-mode login)"
    )]
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
