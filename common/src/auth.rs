//! Credentials and request signing.
//!
//! Signing is a pure function of (request, credential, clock): the `*_string_to_sign`
//! functions build the canonical strings of the three Shared Key schemes and
//! [`SharedKeyCredential::sign`] turns one into a signature. The clock enters only through
//! the `x-ms-date` header the caller has already set, so golden-vector tests pin it.

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures::future::BoxFuture;
use hmac::{Hmac, Mac};
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderValue};
use sha2::Sha256;
use url::Url;

use crate::config::{ConfigError, decode_account_key};
use crate::error::Error;
use crate::redact::Secret;

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
    pub fn from_base64(account: &str, key: &str) -> Result<Self, ConfigError> {
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
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let t = text.trim().trim_start_matches('?');
        let has_sig = t.split('&').any(|p| {
            p.split('=')
                .next()
                .is_some_and(|k| k.eq_ignore_ascii_case("sig"))
        });
        if !has_sig {
            return Err(ConfigError::InvalidEndpoint {
                key: "SharedAccessSignature".into(),
                reason: "it has no sig parameter".into(),
            });
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
    fn token(&self) -> BoxFuture<'_, Result<Secret<String>, Error>>;
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
    fn token(&self) -> BoxFuture<'_, Result<Secret<String>, Error>> {
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

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// `/` + account + the encoded path as sent. For path-style (emulator) URLs the path
/// already starts with the account, so it appears twice, as the service expects.
fn canonical_path(account: &str, url: &Url) -> String {
    format!("/{account}{}", url.path())
}

/// String to sign for Blob and Queue Shared Key (version 2009-09-19 and later).
///
/// <https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key#blob-queue-and-file-services-shared-key-authorization>
pub fn blob_queue_string_to_sign(
    method: &Method,
    headers: &HeaderMap,
    account: &str,
    url: &Url,
) -> String {
    let content_length = match header(headers, "content-length") {
        "0" => "",
        v => v,
    };
    let mut s = String::with_capacity(256);
    for part in [
        method.as_str(),
        header(headers, "content-encoding"),
        header(headers, "content-language"),
        content_length,
        header(headers, "content-md5"),
        header(headers, "content-type"),
        // Date stays empty: we always send x-ms-date, which is a canonicalized header.
        "",
        header(headers, "if-modified-since"),
        header(headers, "if-match"),
        header(headers, "if-none-match"),
        header(headers, "if-unmodified-since"),
        header(headers, "range"),
    ] {
        s.push_str(part);
        s.push('\n');
    }
    // Canonicalized headers: x-ms-*, lower-cased, sorted, values trimmed.
    let mut ms: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        let n = name.as_str();
        if n.starts_with("x-ms-") {
            let v = value.to_str().unwrap_or("").trim().to_string();
            match ms.iter_mut().find(|(k, _)| k == n) {
                Some((_, existing)) => {
                    existing.push(',');
                    existing.push_str(&v);
                }
                None => ms.push((n.to_string(), v)),
            }
        }
    }
    ms.sort();
    for (k, v) in ms {
        s.push_str(&k);
        s.push(':');
        s.push_str(&v);
        s.push('\n');
    }
    // Canonicalized resource: path, then each query parameter (decoded), sorted by name.
    s.push_str(&canonical_path(account, url));
    let mut params: Vec<(String, Vec<String>)> = Vec::new();
    for (k, v) in url.query_pairs() {
        let k = k.to_lowercase();
        match params.iter_mut().find(|(n, _)| *n == k) {
            Some((_, vals)) => vals.push(v.into_owned()),
            None => params.push((k, vec![v.into_owned()])),
        }
    }
    params.sort_by(|a, b| a.0.cmp(&b.0));
    for (k, mut vals) in params {
        vals.sort();
        s.push('\n');
        s.push_str(&k);
        s.push(':');
        s.push_str(&vals.join(","));
    }
    s
}

/// The Table resource string: path plus `?comp=` only; no other parameter is signed.
fn table_canonical_resource(account: &str, url: &Url) -> String {
    let mut r = canonical_path(account, url);
    if let Some((_, comp)) = url.query_pairs().find(|(k, _)| k == "comp") {
        r.push_str("?comp=");
        r.push_str(&comp);
    }
    r
}

/// String to sign for Table Shared Key: `VERB\nContent-MD5\nContent-Type\nDate\nResource`,
/// where Date is the `x-ms-date` value.
///
/// <https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key#table-service-shared-key-authorization>
pub fn table_string_to_sign(
    method: &Method,
    headers: &HeaderMap,
    account: &str,
    url: &Url,
) -> String {
    format!(
        "{}\n{}\n{}\n{}\n{}",
        method.as_str(),
        header(headers, "content-md5"),
        header(headers, "content-type"),
        header(headers, "x-ms-date"),
        table_canonical_resource(account, url)
    )
}

/// String to sign for Table Shared Key Lite: `Date\nResource`.
///
/// <https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key#shared-key-lite-and-table-service-format-for-2009-09-19-and-later>
pub fn table_lite_string_to_sign(headers: &HeaderMap, account: &str, url: &Url) -> String {
    format!(
        "{}\n{}",
        header(headers, "x-ms-date"),
        table_canonical_resource(account, url)
    )
}

/// Which string-to-sign a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningScheme {
    /// Blob or Queue Shared Key.
    BlobQueue,
    /// Table, with the chosen scheme.
    Table(TableAuthScheme),
}

/// The `Authorization` header value for a request whose headers (including `x-ms-date`)
/// are final.
pub fn shared_key_authorization(
    credential: &SharedKeyCredential,
    scheme: SigningScheme,
    method: &Method,
    headers: &HeaderMap,
    url: &Url,
) -> HeaderValue {
    let account = credential.account();
    let (prefix, sts) = match scheme {
        SigningScheme::BlobQueue => (
            "SharedKey",
            blob_queue_string_to_sign(method, headers, account, url),
        ),
        SigningScheme::Table(TableAuthScheme::SharedKey) => (
            "SharedKey",
            table_string_to_sign(method, headers, account, url),
        ),
        SigningScheme::Table(TableAuthScheme::SharedKeyLite) => (
            "SharedKeyLite",
            table_lite_string_to_sign(headers, account, url),
        ),
    };
    let mut v = HeaderValue::from_str(&format!("{prefix} {account}:{}", credential.sign(&sts)))
        .expect("account names and base64 are valid header text");
    v.set_sensitive(true);
    v
}

/// Adds authorization to a request: a Shared Key header, a bearer token, or nothing (SAS
/// is already in the URL). Called for every attempt so each one has a fresh signature.
pub(crate) async fn authorize(
    request: &mut reqwest::Request,
    credential: &Credential,
    scheme: SigningScheme,
) -> Result<(), Error> {
    match credential {
        Credential::SharedKey(key) => {
            let value = shared_key_authorization(
                key,
                scheme,
                request.method(),
                request.headers(),
                request.url(),
            );
            request.headers_mut().insert("authorization", value);
        }
        Credential::Token(provider) => {
            let token = provider.token().await?;
            let mut v = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                .map_err(|_| Error::Auth("token is not valid header text".into()))?;
            v.set_sensitive(true);
            request.headers_mut().insert("authorization", v);
        }
        Credential::Sas(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Golden vectors: canonical strings written out by hand from the REST documentation,
    //! and signatures computed independently (Python `hmac`, see each test) with the
    //! emulator's published key and a fixed clock.
    use super::*;
    use crate::config::{EMULATOR_ACCOUNT, EMULATOR_KEY};

    const DATE: &str = "Sun, 22 Nov 2026 11:28:37 GMT";

    fn cred() -> SharedKeyCredential {
        SharedKeyCredential::from_base64(EMULATOR_ACCOUNT, EMULATOR_KEY).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn blob_put_block_vector() {
        let url = Url::parse(
            "http://127.0.0.1:10000/devstoreaccount1/tablevault/b1/data%20x?comp=block&blockid=MDAwMDAwMDE%3D",
        )
        .unwrap();
        let h = headers(&[
            ("x-ms-date", DATE),
            ("x-ms-version", "2025-11-05"),
            ("content-length", "1024"),
            ("content-md5", "1B2M2Y8AsgTpgAmY7PhCfg=="),
            ("x-ms-client-request-id", "abc"),
        ]);
        let sts = blob_queue_string_to_sign(&Method::PUT, &h, EMULATOR_ACCOUNT, &url);
        assert_eq!(
            sts,
            "PUT\n\n\n1024\n1B2M2Y8AsgTpgAmY7PhCfg==\n\n\n\n\n\n\n\n\
             x-ms-client-request-id:abc\nx-ms-date:Sun, 22 Nov 2026 11:28:37 GMT\nx-ms-version:2025-11-05\n\
             /devstoreaccount1/devstoreaccount1/tablevault/b1/data%20x\nblockid:MDAwMDAwMDE=\ncomp:block"
        );
        // python3 -c "import hmac,hashlib,base64;print(base64.b64encode(hmac.new(base64.b64decode(KEY),STS.encode(),hashlib.sha256).digest()).decode())"
        assert_eq!(
            cred().sign(&sts),
            "Qipl7pmEcz0QvU6Sd15keR5D7J4McYanNJUIVTiIfbg="
        );
        let auth =
            shared_key_authorization(&cred(), SigningScheme::BlobQueue, &Method::PUT, &h, &url);
        assert_eq!(
            auth.to_str().unwrap(),
            "SharedKey devstoreaccount1:Qipl7pmEcz0QvU6Sd15keR5D7J4McYanNJUIVTiIfbg="
        );
    }

    #[test]
    fn blob_get_with_conditions_and_zero_length_vector() {
        let url = Url::parse(
            "https://myaccount.blob.core.windows.net/c?restype=container&comp=list&prefix=a%2Fb&include=metadata",
        )
        .unwrap();
        let h = headers(&[
            ("x-ms-date", DATE),
            ("x-ms-version", "2025-11-05"),
            ("content-length", "0"),
            ("if-none-match", "*"),
            ("range", "bytes=0-99"),
        ]);
        let sts = blob_queue_string_to_sign(&Method::GET, &h, "myaccount", &url);
        assert_eq!(
            sts,
            "GET\n\n\n\n\n\n\n\n\n*\n\nbytes=0-99\n\
             x-ms-date:Sun, 22 Nov 2026 11:28:37 GMT\nx-ms-version:2025-11-05\n\
             /myaccount/c\ncomp:list\ninclude:metadata\nprefix:a/b\nrestype:container"
        );
    }

    #[test]
    fn queue_put_message_vector() {
        let url =
            Url::parse("http://127.0.0.1:10001/devstoreaccount1/tasks/messages?messagettl=-1")
                .unwrap();
        let h = headers(&[
            ("x-ms-date", DATE),
            ("x-ms-version", "2025-11-05"),
            ("content-length", "62"),
            ("content-type", "application/xml"),
        ]);
        let sts = blob_queue_string_to_sign(&Method::POST, &h, EMULATOR_ACCOUNT, &url);
        assert_eq!(
            sts,
            "POST\n\n\n62\n\napplication/xml\n\n\n\n\n\n\n\
             x-ms-date:Sun, 22 Nov 2026 11:28:37 GMT\nx-ms-version:2025-11-05\n\
             /devstoreaccount1/devstoreaccount1/tasks/messages\nmessagettl:-1"
        );
        assert_eq!(
            cred().sign(&sts),
            "QsnUZi79CGn7EzezNDtHecR/p0+iD08XPiyCMzKDtSw="
        );
    }

    #[test]
    fn table_shared_key_vector() {
        let url = Url::parse(
            "http://127.0.0.1:10002/devstoreaccount1/Tables?$filter=TableName%20eq%20'x'",
        )
        .unwrap();
        let h = headers(&[
            ("x-ms-date", DATE),
            ("x-ms-version", "2019-02-02"),
            ("content-type", "application/json"),
            ("accept", "application/json;odata=minimalmetadata"),
        ]);
        let sts = table_string_to_sign(&Method::POST, &h, EMULATOR_ACCOUNT, &url);
        assert_eq!(
            sts,
            "POST\n\napplication/json\nSun, 22 Nov 2026 11:28:37 GMT\n/devstoreaccount1/devstoreaccount1/Tables"
        );
        assert_eq!(
            cred().sign(&sts),
            "AkMfhP6cXcjg2yC0MehPuHbQdtNLgV8cevo0nci+rIg="
        );
        let auth = shared_key_authorization(
            &cred(),
            SigningScheme::Table(TableAuthScheme::SharedKey),
            &Method::POST,
            &h,
            &url,
        );
        assert_eq!(
            auth.to_str().unwrap(),
            "SharedKey devstoreaccount1:AkMfhP6cXcjg2yC0MehPuHbQdtNLgV8cevo0nci+rIg="
        );
    }

    #[test]
    fn table_shared_key_lite_vector_signs_comp_only() {
        let url = Url::parse(
            "https://myaccount.table.core.windows.net/mytable?comp=acl&NextPartitionKey=abc",
        )
        .unwrap();
        let h = headers(&[("x-ms-date", DATE)]);
        let sts = table_lite_string_to_sign(&h, "myaccount", &url);
        assert_eq!(
            sts,
            "Sun, 22 Nov 2026 11:28:37 GMT\n/myaccount/mytable?comp=acl"
        );
        let myaccount = SharedKeyCredential::from_base64("myaccount", EMULATOR_KEY).unwrap();
        let auth = shared_key_authorization(
            &myaccount,
            SigningScheme::Table(TableAuthScheme::SharedKeyLite),
            &Method::GET,
            &h,
            &url,
        );
        assert_eq!(
            auth.to_str().unwrap(),
            "SharedKeyLite myaccount:gJzHDRwD/B2RjpgDMz4jkZK8MNQ+x971ZhEPCTXJyZ4="
        );
    }

    #[test]
    fn sas_is_appended_verbatim() {
        let sas = SasToken::parse("?sv=2022-11-02&sig=ab%2Bc%3D").unwrap();
        let mut url = Url::parse("https://a.blob.core.windows.net/c/b?comp=block").unwrap();
        sas.append_to(&mut url);
        assert_eq!(
            url.as_str(),
            "https://a.blob.core.windows.net/c/b?comp=block&sv=2022-11-02&sig=ab%2Bc%3D"
        );
        assert!(SasToken::parse("sv=1&se=2").is_err());
        assert_eq!(format!("{sas:?}"), "SasToken(REDACTED)");
    }
}
