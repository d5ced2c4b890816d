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
    /// The SAS's expiry (`se=`) has passed: every request would be refused.
    #[error(
        "SharedAccessSignature expired at {0} (its se= parameter); ask for a new one (the signature is not shown)"
    )]
    SasExpired(String),
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
    /// Accepts a SAS with or without a leading `?`; it must contain a `sig` parameter,
    /// and its expiry (`se=`), where it reads as a date, must not have passed.
    ///
    /// Values are percent-encoded where they were pasted decoded: a `sig` copied from a
    /// tool that shows it decoded holds `+`, which a query decodes as a space, and
    /// every request was then refused as badly signed. What is already encoded stays
    /// as given.
    pub fn parse(text: &str) -> Result<Self, CredentialError> {
        Self::parse_at(text, std::time::SystemTime::now())
    }

    fn parse_at(text: &str, now: std::time::SystemTime) -> Result<Self, CredentialError> {
        let t = text.trim().trim_start_matches('?');
        let params: Vec<(&str, &str)> = t
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        if !params.iter().any(|(k, _)| k.eq_ignore_ascii_case("sig")) {
            return Err(CredentialError::SasWithoutSignature);
        }
        let expiry = params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("se"))
            .map(|(_, v)| percent_encoding::percent_decode_str(v).decode_utf8_lossy());
        if let Some(se) = expiry
            && sas_time(&se).is_some_and(|at| at <= now)
        {
            return Err(CredentialError::SasExpired(se.into_owned()));
        }
        let query = params
            .iter()
            .map(|(k, v)| format!("{k}={}", encode_sas_value(v)))
            .collect::<Vec<_>>()
            .join("&");
        Ok(SasToken(Secret::new(query)))
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

/// A SAS time (`se=`, `st=`): a UTC date, or a date and time to the minute or second
/// (ISO 8601, as the portal and the SDKs write them); `None` for anything else.
fn sas_time(text: &str) -> Option<std::time::SystemTime> {
    let full = match text.len() {
        10 => format!("{text}T00:00:00Z"),
        17 if text.ends_with('Z') => format!("{}:00Z", &text[..16]),
        _ => text.to_string(),
    };
    humantime::parse_rfc3339_weak(full.trim_end_matches('Z')).ok()
}

/// A SAS parameter's value with every byte a query may not carry as is percent-encoded;
/// `%XX` escapes already there are kept.
fn encode_sas_value(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = String::with_capacity(value.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escape = b == b'%'
            && bytes.len() > i + 2
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit();
        if escape {
            out.push_str(&value[i..i + 3]);
            i += 3;
            continue;
        }
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
        i += 1;
    }
    out
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

    /// Why the last request for a token got no answer (host and cause), while no
    /// answer has come since: named when an operation's deadline passes waiting for a
    /// token, which would otherwise say only that it waited.
    fn unanswered(&self) -> Option<String> {
        None
    }
}

/// How an error names why the last token request got no answer
/// ([`TokenProvider::unanswered`]): ` (last token request: why)`.
pub(crate) fn last_token_request(why: &str) -> String {
    format!(" (last token request: {why})")
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn at(rfc3339: &str) -> SystemTime {
        humantime::parse_rfc3339(rfc3339).unwrap()
    }

    /// Regression: a `sig` pasted decoded (`+`, `/`, `=` as base64 writes them) was sent
    /// as given, and the service read its `+` as a space: every request refused.
    #[test]
    fn values_pasted_decoded_are_encoded_and_encoded_ones_kept() {
        let now = at("2026-01-01T00:00:00Z");
        for (given, sent) in [
            (
                "sv=2022-11-02&sig=ab+c/d=",
                "sv=2022-11-02&sig=ab%2Bc%2Fd%3D",
            ),
            (
                "?sv=2022-11-02&sig=ab%2Bc%2Fd%3D",
                "sv=2022-11-02&sig=ab%2Bc%2Fd%3D",
            ),
            (
                "se=2030-01-01T00:00:00Z&spr=https,http&sig=a%2b+",
                "se=2030-01-01T00%3A00%3A00Z&spr=https%2Chttp&sig=a%2b%2B",
            ),
            ("sig=100%&sv=1", "sig=100%25&sv=1"),
        ] {
            let sas = SasToken::parse_at(given, now).unwrap();
            assert_eq!(sas.query(), sent, "{given}");
        }
    }

    /// Regression: an expired SAS was sent, and the service's "failed to authenticate"
    /// did not say why.
    #[test]
    fn an_expired_sas_is_refused_by_its_date() {
        let now = at("2026-06-01T12:00:00Z");
        for se in [
            "2026-06-01",
            "2026-06-01T11:59Z",
            "2026-06-01T11%3A59%3A59Z",
            "2026-06-01T11:59:59.5000000Z",
            "2020-01-01T00:00:00Z",
        ] {
            let err = SasToken::parse_at(&format!("sv=1&se={se}&sig=SECRET"), now)
                .err()
                .unwrap_or_else(|| panic!("{se} is past"));
            let text = err.to_string();
            assert!(
                text.contains("expired at 2026") || text.contains("expired at 2020"),
                "{text}"
            );
            assert!(!text.contains("SECRET"), "{text}");
        }
        for se in ["2026-06-02", "2026-06-01T12:01Z", "not a date", ""] {
            assert!(
                SasToken::parse_at(&format!("se={se}&sig=x"), now).is_ok(),
                "{se}"
            );
        }
        let later = now + Duration::from_secs(3600);
        assert!(SasToken::parse_at("se=2026-06-01T12:30Z&sig=x", now).is_ok());
        assert!(SasToken::parse_at("se=2026-06-01T12:30Z&sig=x", later).is_err());
    }
}
