//! Keeping secrets out of logs and errors: a [`Secret`] wrapper whose `Debug` hides its
//! value, and scrubbers for text and URLs that may carry account keys, SAS signatures or
//! bearer tokens.

use std::fmt;

/// The text that replaces a secret.
pub const REDACTED: &str = "REDACTED";

/// A value that must never be printed: `Debug` and `Display` show `REDACTED`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps a secret value.
    pub fn new(value: T) -> Self {
        Secret(value)
    }

    /// The secret itself, for the one place that must use it (signing, a header).
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Names (case-insensitive) of `key=value` pairs whose value is a secret, in query strings
/// and in connection strings.
const SECRET_KEYS: &[&str] = &[
    "sig",
    "accountkey",
    "sharedaccesssignature",
    "client_secret",
];

/// Replaces the values of secret `key=value` pairs (SAS `sig`, `AccountKey`,
/// `SharedAccessSignature`, `client_secret`) and `Bearer` / `SharedKey` credentials in free
/// text. Used on any text that came from outside before it goes into an error or a log.
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let (before, after) = rest.split_at(eq);
        let key_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let key = &before[key_start..];
        out.push_str(before);
        out.push('=');
        let after = &after[1..];
        if SECRET_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            // A SharedAccessSignature value is itself a query string: drop it all up to ';'.
            let end = if key.eq_ignore_ascii_case("sharedaccesssignature") {
                after
                    .find([';', ' ', '\n', '"', '\''])
                    .unwrap_or(after.len())
            } else {
                after
                    .find(['&', ';', ' ', '\n', '"', '\'', ')'])
                    .unwrap_or(after.len())
            };
            out.push_str(REDACTED);
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    redact_jwts(&redact_auth_schemes(&out))
}

/// Replaces JSON Web Tokens standing alone in text (`eyJ…` header, payload and
/// signature in base64url, joined by dots): Entra ID access tokens, and federated
/// tokens an identity provider may echo in an error without any `Bearer` before them.
fn redact_jwts(text: &str) -> String {
    let is_unit = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("eyJ") {
        let (before, from) = rest.split_at(pos);
        let preceded_by_unit = before.chars().next_back().is_some_and(is_unit);
        let len = from.find(|c: char| !is_unit(c)).unwrap_or(from.len());
        let candidate = &from[..len];
        let parts: Vec<&str> = candidate.split('.').collect();
        out.push_str(before);
        if !preceded_by_unit && parts.len() == 3 && parts[..2].iter().all(|p| p.len() >= 4) {
            out.push_str(REDACTED);
        } else {
            out.push_str(candidate);
        }
        rest = &from[len..];
    }
    out.push_str(rest);
    out
}

fn redact_auth_schemes(text: &str) -> String {
    let mut out = text.to_string();
    for scheme in ["Bearer ", "SharedKey ", "SharedKeyLite "] {
        let mut search_from = 0;
        while let Some(pos) = out[search_from..].find(scheme) {
            let start = search_from + pos + scheme.len();
            let end = out[start..]
                .find([' ', '\n', '"', '\'', ',', ')'])
                .map_or(out.len(), |i| start + i);
            out.replace_range(start..end, REDACTED);
            search_from = start + REDACTED.len();
        }
    }
    out
}

/// A URL as it may be logged: scheme, host, path, and the query with secret values
/// replaced.
pub fn redact_url(url: &url::Url) -> String {
    redact_text(url.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_sas_signature_and_keeps_the_rest() {
        let s = "GET https://a.blob.core.windows.net/c?sv=2022-11-02&sig=abc%2Bdef%3D&se=2030";
        let r = redact_text(s);
        assert!(!r.contains("abc%2Bdef"), "{r}");
        assert!(r.contains("sv=2022-11-02") && r.contains("se=2030") && r.contains("sig=REDACTED"));
    }

    #[test]
    fn redacts_connection_string_secrets() {
        let s = "AccountName=a;AccountKey=Zm9vYmFy==;SharedAccessSignature=sv=1&sig=x;X=1";
        let r = redact_text(s);
        assert_eq!(
            r,
            "AccountName=a;AccountKey=REDACTED;SharedAccessSignature=REDACTED;X=1"
        );
    }

    #[test]
    fn redacts_authorization_headers() {
        let r = redact_text("authorization: Bearer eyJhbGciOi.x.y, SharedKey acct:c2ln");
        assert!(!r.contains("eyJ") && !r.contains("c2ln"), "{r}");
    }

    #[test]
    fn redacts_bare_json_web_tokens() {
        let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJlX2J5dGVz";
        let r = redact_text(&format!(
            "AADSTS700024: Client assertion is not within its valid time range. \
             assertion: {jwt}, trace: 1"
        ));
        assert!(!r.contains("eyJ") && !r.contains("c2lnbmF0"), "{r}");
        assert!(r.contains("assertion: REDACTED, trace: 1"), "{r}");
        // A token alone, and one at the end of a JSON string.
        assert_eq!(redact_text(jwt), REDACTED);
        assert_eq!(
            redact_text(&format!("{{\"access_token\":\"{jwt}\"}}")),
            format!("{{\"access_token\":\"{REDACTED}\"}}")
        );
        // Text that merely holds `eyJ` is left alone.
        for kept in ["keyJar", "eyJ", "id=eyJabc", "eyJab.cd"] {
            assert_eq!(redact_text(kept), kept);
        }
    }

    #[test]
    fn secret_debug_hides_value() {
        let s = Secret::new("hunter2".to_string());
        assert_eq!(format!("{s:?} {s}"), "REDACTED REDACTED");
    }
}
