//! Credentials: an account key, a SAS token, or a source of Microsoft Entra ID tokens.
//!
//! Every secret lives in a [`Secret`], so no `Debug`, `Display` or log line shows it. How
//! a credential turns into an `Authorization` header is [`crate::signing`]'s business.

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures::future::BoxFuture;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use url::Url;

use crate::redact::Secret;

/// Why a credential could not be built. Messages never contain the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The account key is not valid base64 (or is empty).
    #[error("AccountKey is not valid base64 (value not shown)")]
    InvalidAccountKey,
    /// A SAS without its `sig` parameter cannot authorize anything.
    #[error("SharedAccessSignature has no sig parameter")]
    SasWithoutSignature,
}

/// Why a token provider could not produce a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TokenError(pub String);

/// Decodes an account key as the portal shows it (standard base64).
pub fn decode_account_key(key: &str) -> Result<Vec<u8>, CredentialError> {
    let bytes = BASE64
        .decode(key.trim())
        .map_err(|_| CredentialError::InvalidAccountKey)?;
    if bytes.is_empty() {
        return Err(CredentialError::InvalidAccountKey);
    }
    Ok(bytes)
}

/// How requests to an account are authorized.
#[derive(Clone, Debug)]
pub enum Credential {
    /// Account name and key: Shared Key (or Shared Key Lite for Table) signatures.
    SharedKey(SharedKeyCredential),
    /// A shared access signature appended to every URL.
    Sas(SasToken),
    /// Microsoft Entra ID bearer tokens from a provider.
    Token(Arc<dyn TokenProvider>),
}

/// An account name and its decoded key.
#[derive(Clone)]
pub struct SharedKeyCredential {
    account: String,
    key: Secret<Vec<u8>>,
}

impl fmt::Debug for SharedKeyCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeyCredential")
            .field("account", &self.account)
            .field("key", &self.key)
            .finish()
    }
}

impl SharedKeyCredential {
    /// A credential from an account name and a base64 key as shown in the portal.
    pub fn from_base64(account: &str, key: &str) -> Result<Self, CredentialError> {
        Ok(SharedKeyCredential {
            account: account.to_string(),
            key: Secret::new(decode_account_key(key)?),
        })
    }

    /// The account the key belongs to.
    pub fn account(&self) -> &str {
        &self.account
    }

    pub(crate) fn key_base64(&self) -> String {
        BASE64.encode(self.key.expose())
    }

    /// `base64(HMAC-SHA256(key, string_to_sign))`.
    pub fn sign(&self, string_to_sign: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(self.key.expose()).expect("HMAC accepts any key size");
        mac.update(string_to_sign.as_bytes());
        BASE64.encode(mac.finalize().into_bytes())
    }
}

/// A SAS token: the query string a user was given, stored without its leading `?`.
#[derive(Clone)]
pub struct SasToken(Secret<String>);

impl fmt::Debug for SasToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SasToken(REDACTED)")
    }
}

impl SasToken {
    /// Accepts a SAS with or without a leading `?`; it must contain a `sig` parameter.
    pub fn parse(text: &str) -> Result<Self, CredentialError> {
        let t = text.trim().trim_start_matches('?');
        let has_sig = t.split('&').any(|p| {
            p.split('=')
                .next()
                .is_some_and(|k| k.eq_ignore_ascii_case("sig"))
        });
        if !has_sig {
            return Err(CredentialError::SasWithoutSignature);
        }
        Ok(SasToken(Secret::new(t.to_string())))
    }

    /// The token's query string (secret).
    pub(crate) fn query(&self) -> &str {
        self.0.expose()
    }

    /// Appends the token to a URL's query, keeping its percent-encoding exactly as given
    /// (`sig` is base64 and must not be re-encoded).
    pub fn append_to(&self, url: &mut Url) {
        let q = match url.query() {
            Some(existing) if !existing.is_empty() => format!("{existing}&{}", self.query()),
            _ => self.query().to_string(),
        };
        url.set_query(Some(&q));
    }
}

/// A source of Microsoft Entra ID access tokens for `https://storage.azure.com/`.
///
/// Client-credential and managed-identity providers implement this; callers cache and
/// refresh as they see fit. The returned token is sent as `Authorization: Bearer`.
pub trait TokenProvider: Send + Sync + fmt::Debug {
    /// A currently valid access token.
    fn token(&self) -> BoxFuture<'_, Result<Secret<String>, TokenError>>;

    /// Who the tokens belong to (kind and ids, never a token), for error messages.
    fn identity(&self) -> Option<String> {
        None
    }
}

/// A fixed token, for tests and for tokens obtained outside tablevault.
pub struct StaticToken(Secret<String>);

impl StaticToken {
    /// Wraps a token string.
    pub fn new(token: impl Into<String>) -> Self {
        StaticToken(Secret::new(token.into()))
    }
}

impl fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StaticToken(REDACTED)")
    }
}

impl TokenProvider for StaticToken {
    fn token(&self) -> BoxFuture<'_, Result<Secret<String>, TokenError>> {
        let t = self.0.clone();
        Box::pin(async move { Ok(t) })
    }
}

/// Which Table Shared Key scheme to use; they sign different strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableAuthScheme {
    /// `SharedKey`: verb, Content-MD5, Content-Type, date, resource.
    #[default]
    SharedKey,
    /// `SharedKeyLite`: date and resource only.
    SharedKeyLite,
}
