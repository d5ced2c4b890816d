//! The request pipeline shared by the Table, Queue and Blob clients: build the URL (with
//! the SAS, if any), stamp `x-ms-date`/`x-ms-version`, sign, send, read the whole body,
//! turn failures into [`Error`]s, and retry per the [`RetryPolicy`]. Each attempt is
//! built and signed afresh.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::config::{ConfigError, StorageAccount};
use crate::credential::{Credential, TableAuthScheme};
use crate::error::{Error, Result};
use crate::redact::redact_text;
use crate::service::Service;
use crate::signing::{SigningScheme, shared_key_authorization};

pub mod http;
pub mod observe;
pub mod retry;

pub use http::{CA_CERT_ENV, trust_ca_certificate};
pub use observe::{AttemptOutcome, RequestObserver};
pub use retry::{Idempotency, RetryObserver, RetryPolicy};

use http::shared_http_client;

/// `x-ms-version` for Blob and Queue: recent enough for 4000 MiB blocks, the current SAS
/// layout and bearer tokens, and accepted by Azurite 3.37.
pub const BLOB_QUEUE_VERSION: &str = "2025-11-05";
/// `x-ms-version` for Table: the version of the Table REST specification and the SDKs.
pub const TABLE_VERSION: &str = "2019-02-02";

/// Everything outside RFC 3986's unreserved set is percent-encoded in query values and key
/// literals, so `=`, `+`, `/`, `'`, `%` and spaces never reach a canonicalizer raw.
pub(crate) const STRICT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a value for a query string or a path segment.
pub(crate) fn encode(value: &str) -> String {
    utf8_percent_encode(value, STRICT).to_string()
}

/// Tuning shared by all clients built from one account.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Retry behaviour for every request.
    pub retry: RetryPolicy,
    /// Limit on one attempt, from connecting to the last body byte.
    pub request_timeout: Duration,
    /// Limit on one operation, every attempt and backoff included: past it the operation
    /// fails with [`Error::Deadline`], naming the host, so a dead endpoint is reported in
    /// bounded time.
    pub deadline: Duration,
    /// Cancels every request and retry at once (Ctrl-C): the operation fails with
    /// [`Error::Cancelled`].
    pub cancel: Option<CancellationToken>,
    /// Table signing scheme.
    pub table_auth: TableAuthScheme,
    /// Told about every attempt (metrics).
    pub observer: Option<std::sync::Arc<dyn RequestObserver>>,
}

/// Default limit on one attempt: a page of the table service takes at most 5 s to
/// compute and a 4 MiB block uploads in seconds, so 30 s means the endpoint is stuck.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Default limit on one operation with its retries: a dead endpoint fails well within
/// two minutes, while throttling that lasts a minute is still ridden out.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(90);

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            retry: RetryPolicy::default(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            deadline: DEFAULT_DEADLINE,
            cancel: None,
            table_auth: TableAuthScheme::SharedKey,
            observer: None,
        }
    }
}

/// `host:port` of a URL (the scheme's port where none is given), as errors name a host;
/// the whole URL where it has no host.
pub(crate) fn host_and_port(url: &Url) -> String {
    match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        _ => url.as_str().to_string(),
    }
}

/// How the last error reads while an operation waits for a token.
const WAITING_FOR_TOKEN: &str = "waiting for an Entra ID token";

/// Adds authorization to a request: a Shared Key header, a bearer token, or nothing (SAS
/// is already in the URL). Called for every attempt so each one has a fresh signature.
///
/// While a bearer token is awaited (not at hand in the cache), `waiting` says so: an
/// operation whose deadline passes then names the identity provider, not the storage
/// host, which a hung token endpoint was once blamed on ("no answer").
async fn authorize(
    request: &mut reqwest::Request,
    credential: &Credential,
    scheme: SigningScheme,
    waiting: &std::sync::Mutex<Option<String>>,
) -> Result<()> {
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
            let mut fetch = provider.token();
            let token = match futures::poll!(&mut fetch) {
                std::task::Poll::Ready(token) => token,
                std::task::Poll::Pending => {
                    let who = provider.identity().unwrap_or_else(|| "the identity".into());
                    let before = waiting.lock().expect("last error").replace(format!(
                        "{WAITING_FOR_TOKEN} for {who} from its identity provider"
                    ));
                    let token = fetch.await;
                    *waiting.lock().expect("last error") = before;
                    token
                }
            }
            .map_err(|e| Error::Auth(e.to_string()))?;
            let mut v = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                .map_err(|_| Error::Auth("token is not valid header text".into()))?;
            v.set_sensitive(true);
            request.headers_mut().insert("authorization", v);
        }
        Credential::Sas(_) => {}
    }
    Ok(())
}

/// One request, described independently of any attempt.
pub(crate) struct Request {
    pub op: &'static str,
    pub method: Method,
    /// Encoded path relative to the service endpoint, starting with `/` (or empty).
    pub path: String,
    /// Query parameters with raw (unencoded) values.
    pub query: Vec<(&'static str, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub idempotency: Idempotency,
    /// The most bytes of a successful response's body to read: past it the response is
    /// dropped unread and the attempt fails with [`Error::ResponseTooLarge`].
    pub max_body: Option<usize>,
    /// Why the request cannot be sent (a header that is not valid header text).
    invalid: Option<String>,
}

impl Request {
    pub fn new(op: &'static str, method: Method, path: impl Into<String>) -> Self {
        let idempotency = if method == Method::POST {
            Idempotency::NotIdempotent
        } else {
            Idempotency::Idempotent
        };
        Request {
            op,
            method,
            path: path.into(),
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            idempotency,
            max_body: None,
            invalid: None,
        }
    }

    pub fn query(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.query.push((name, value.into()));
        self
    }

    pub fn header(self, name: &'static str, value: &str) -> Self {
        self.dynamic_header(name, value)
    }

    /// A header whose name is built at run time (`x-ms-meta-*`). An invalid name or value
    /// makes the request fail at send time: sending it without the header would be wrong.
    pub fn dynamic_header(mut self, name: &str, value: &str) -> Self {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(n), Ok(v)) => {
                self.headers.append(n, v);
            }
            _ => {
                self.invalid.get_or_insert_with(|| {
                    format!("header {name:?} or its value is not valid header text (metadata must be ASCII)")
                });
            }
        }
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// Reads at most `bytes` of a successful response's body ([`Request::max_body`]).
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = Some(bytes);
        self
    }
}

/// A successful response with its body read in full.
#[derive(Debug)]
pub(crate) struct Response {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A signed, retrying connection to one service of one account.
#[derive(Clone)]
pub(crate) struct ServiceClient {
    http: reqwest::Client,
    request_timeout: Duration,
    deadline: Duration,
    cancel: Option<CancellationToken>,
    /// `host:port` of the endpoint, for errors.
    host: String,
    endpoint: Url,
    credential: Credential,
    scheme: SigningScheme,
    version: &'static str,
    retry: RetryPolicy,
    default_headers: HeaderMap,
    /// With a bearer token: explains a 401/403 (identity, account, missing role).
    refusal: Option<crate::identity::Refusal>,
    service: Service,
    observer: Option<std::sync::Arc<dyn RequestObserver>>,
}

impl ServiceClient {
    pub fn new(
        account: &StorageAccount,
        service: Service,
        options: &ClientOptions,
    ) -> std::result::Result<Self, ConfigError> {
        let endpoint = account.endpoint(service)?.clone();
        let (scheme, version) = match service {
            Service::Table => (SigningScheme::Table(options.table_auth), TABLE_VERSION),
            Service::Blob | Service::Queue => (SigningScheme::BlobQueue, BLOB_QUEUE_VERSION),
        };
        let mut default_headers = HeaderMap::new();
        if service == Service::Table {
            // Azurite accepts exactly this string (no charset, no streaming) and nothing else.
            default_headers.insert(
                "accept",
                HeaderValue::from_static("application/json;odata=minimalmetadata"),
            );
            default_headers.insert("dataserviceversion", HeaderValue::from_static("3.0;"));
            default_headers.insert(
                "maxdataserviceversion",
                HeaderValue::from_static("3.0;NetFx"),
            );
        }
        Ok(ServiceClient {
            http: shared_http_client()?,
            request_timeout: options.request_timeout,
            deadline: options.deadline,
            cancel: options.cancel.clone(),
            host: host_and_port(&endpoint),
            endpoint,
            credential: account.credential().clone(),
            scheme,
            version,
            retry: options.retry.clone(),
            default_headers,
            refusal: match account.credential() {
                Credential::Token(provider) => Some(crate::identity::Refusal {
                    account: account.name().to_string(),
                    service,
                    provider: provider.clone(),
                }),
                _ => None,
            },
            service,
            observer: options.observer.clone(),
        })
    }

    /// The service endpoint (no trailing slash), for building absolute sub-request URLs.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    fn url_for(&self, req: &Request) -> Result<Url> {
        let mut s = String::with_capacity(128);
        s.push_str(self.endpoint.as_str().trim_end_matches('/'));
        s.push_str(&req.path);
        if !req.query.is_empty() {
            s.push('?');
            for (i, (k, v)) in req.query.iter().enumerate() {
                if i > 0 {
                    s.push('&');
                }
                s.push_str(k);
                s.push('=');
                s.push_str(&encode(v));
            }
        }
        let mut url = Url::parse(&s).map_err(|e| Error::invalid_request(req.op, e.to_string()))?;
        if let Credential::Sas(sas) = &self.credential {
            sas.append_to(&mut url);
        }
        Ok(url)
    }

    /// Sends with retries and returns the successful response.
    pub async fn send(&self, req: Request) -> Result<Response> {
        self.send_with(req, Ok).await
    }

    /// Sends with retries; `check` inspects each successful response and may turn it into
    /// an error (for example a failed change set inside a 202), which is retried like any
    /// other.
    ///
    /// The whole operation is bounded by the deadline and stops at once when the
    /// cancellation token fires, backoff sleeps included.
    pub async fn send_with<T>(
        &self,
        req: Request,
        check: impl Fn(Response) -> Result<T>,
    ) -> Result<T> {
        let req = &req;
        let check = &check;
        let last_error = std::sync::Mutex::new(None::<String>);
        let last_error = &last_error;
        let run = self.retry.run(req.op, req.idempotency, || async move {
            let result = self.attempt(req, last_error).await.and_then(check);
            if let Err(e) = &result {
                *last_error.lock().expect("last error") = Some(e.to_string());
            }
            result
        });
        let cancelled = async {
            match &self.cancel {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = cancelled => Err(Error::Cancelled { op: req.op }),
            outcome = tokio::time::timeout(self.deadline, run) => match outcome {
                Ok(result) => result,
                Err(_) => Err(Error::Deadline {
                    op: req.op,
                    host: self.host.clone(),
                    after: self.deadline,
                    last: self.deadline_last_error(last_error),
                }),
            },
        }
    }

    /// What an operation whose deadline passed names as its last error: "no answer"
    /// if none, and while it waited for a token, why the last token request got no
    /// answer (an identity endpoint refusing connections was only "waiting").
    fn deadline_last_error(&self, last_error: &std::sync::Mutex<Option<String>>) -> String {
        let mut last = last_error
            .lock()
            .expect("last error")
            .take()
            .unwrap_or_else(|| "no answer".into());
        if let (true, Credential::Token(provider)) =
            (last.starts_with(WAITING_FOR_TOKEN), &self.credential)
            && let Some(why) = provider.unanswered()
        {
            last.push_str(&crate::credential::last_token_request(&why));
        }
        last
    }

    /// One attempt. `waiting` is what the operation's deadline names as its last error
    /// ([`authorize`]).
    async fn attempt(
        &self,
        req: &Request,
        waiting: &std::sync::Mutex<Option<String>>,
    ) -> Result<Response> {
        if let Some(why) = &req.invalid {
            return Err(Error::invalid_request(req.op, why.clone()));
        }
        let url = self.url_for(req)?;
        let mut request = reqwest::Request::new(req.method.clone(), url);
        *request.timeout_mut() = Some(self.request_timeout);
        let headers = request.headers_mut();
        headers.extend(self.default_headers.clone());
        headers.extend(req.headers.clone());
        let date = httpdate::fmt_http_date(SystemTime::now());
        headers.insert(
            "x-ms-date",
            HeaderValue::from_str(&date).expect("HTTP date is ASCII"),
        );
        headers.insert("x-ms-version", HeaderValue::from_static(self.version));
        let has_body = !req.body.is_empty() || matches!(req.method, Method::PUT | Method::POST);
        if has_body {
            headers.insert("content-length", HeaderValue::from(req.body.len()));
            *request.body_mut() = Some(req.body.clone().into());
        }
        authorize(&mut request, &self.credential, self.scheme, waiting).await?;

        tracing::debug!(op = req.op, method = %req.method, path = %req.path, "request");
        let started = std::time::Instant::now();
        let observe = |outcome: AttemptOutcome| {
            if let Some(o) = &self.observer {
                o.on_attempt(self.service, req.op, outcome, started.elapsed());
            }
        };
        let response = self.http.execute(request).await.map_err(|e| {
            observe(AttemptOutcome::Transport);
            Error::from_reqwest(req.op, &self.host, e)
        })?;
        let status = response.status();
        let headers = response.headers().clone();
        let limit = req.max_body.filter(|_| status.is_success());
        let body = match limit {
            Some(limit) => read_at_most(response, limit).await,
            None => response.bytes().await.map(Some),
        }
        .map_err(|e| {
            observe(AttemptOutcome::Transport);
            Error::from_reqwest(req.op, &self.host, e)
        })?;
        // Only a read with a limit comes back without a body.
        let Some(body) = body else {
            observe(AttemptOutcome::Status(status.as_u16()));
            return Err(Error::ResponseTooLarge {
                op: req.op,
                limit: limit.unwrap_or_default(),
            });
        };
        observe(AttemptOutcome::Status(status.as_u16()));
        tracing::debug!(
            op = req.op,
            status = status.as_u16(),
            bytes = body.len(),
            "response"
        );
        if status.is_success() {
            Ok(Response { headers, body })
        } else {
            let e = service_error(req.op, status, &headers, &body);
            Err(match &self.refusal {
                Some(r) => r.explain(e, &req.method),
                None => e,
            })
        }
    }
}

/// The body of `response`, unless it holds more than `limit` bytes (by its
/// `Content-Length`, or once that many arrived): then `None`, and the rest is never read.
async fn read_at_most(
    mut response: reqwest::Response,
    limit: usize,
) -> reqwest::Result<Option<Bytes>> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body.freeze()))
}

/// Builds an [`Error::Service`] from a failed response: code from `x-ms-error-code` or the
/// body (XML for Blob/Queue, JSON for Table), the first line of the message, and any
/// requested retry delay.
pub(crate) fn service_error(
    op: &'static str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Error {
    let text = String::from_utf8_lossy(body);
    let (body_code, body_message) = parse_error_body(&text);
    let code = headers
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(body_code)
        .filter(|c| !c.is_empty());
    let message = body_message
        .map(|m| m.lines().next().unwrap_or("").trim().to_string())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
    Error::Service {
        op,
        status: status.as_u16(),
        code,
        message: redact_text(&truncate(&message, 300)),
        retry_after: retry_after(headers),
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Extracts `(code, message)` from an XML `<Error>` or a JSON `odata.error` body.
pub(crate) fn parse_error_body(text: &str) -> (Option<String>, Option<String>) {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(trimmed) {
            let e = &v["odata.error"];
            let code = e["code"].as_str().map(str::to_string);
            let message = e["message"]["value"]
                .as_str()
                .or_else(|| e["message"].as_str())
                .map(str::to_string);
            return (code, message);
        }
        return (None, None);
    }
    (
        xml_element(trimmed, "Code"),
        xml_element(trimmed, "Message"),
    )
}

fn xml_element(text: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find(&close)? + start;
    quick_xml::escape::unescape(&text[start..end])
        .ok()
        .map(|c| c.into_owned())
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    if let Some(ms) = get("x-ms-retry-after-ms").and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_millis(ms));
    }
    let v = get("retry-after")?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token provider whose identity provider never answers.
    #[derive(Debug)]
    struct Hung;
    impl crate::credential::TokenProvider for Hung {
        fn token(
            &self,
        ) -> futures::future::BoxFuture<
            '_,
            std::result::Result<crate::redact::Secret<String>, crate::credential::TokenError>,
        > {
            Box::pin(std::future::pending())
        }
        fn identity(&self) -> Option<String> {
            Some("workload identity (client id c-1)".into())
        }
        fn unanswered(&self) -> Option<String> {
            Some("login.example:443: tcp connect error: Connection refused".into())
        }
    }

    /// Regression: a hung token endpoint was reported as the storage host's silence
    /// (`List Blobs to 127.0.0.1:…: no success within 20 s, giving up (last error: no
    /// answer)`), though storage was fine. The deadline now names the wait for a token,
    /// and why the token endpoint did not answer (it said only "waiting" of an endpoint
    /// refusing connections, whose cause the SDK tells after its own retries, ~80 s).
    #[tokio::test]
    async fn a_deadline_spent_waiting_for_a_token_says_so() {
        let account = crate::StorageAccount::from_connection_string(
            "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;\
             BlobEndpoint=http://127.0.0.1:9/acct;QueueEndpoint=http://127.0.0.1:9/acct;\
             TableEndpoint=http://127.0.0.1:9/acct",
        )
        .unwrap()
        .with_credential(Credential::Token(std::sync::Arc::new(Hung)));
        let options = ClientOptions {
            deadline: Duration::from_millis(300),
            ..ClientOptions::default()
        };
        let svc = ServiceClient::new(&account, crate::Service::Blob, &options).unwrap();
        let e = svc
            .send(Request::new("List Blobs", Method::GET, "/"))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("waiting for an Entra ID token for workload identity (client id c-1)"),
            "{text}"
        );
        // And why the identity provider has not answered, where the transport knows.
        assert!(
            text.contains(
                "(last token request: login.example:443: tcp connect error: Connection refused)"
            ),
            "{text}"
        );
    }

    #[test]
    fn error_bodies_of_both_formats() {
        let (c, m) = parse_error_body(
            r#"<?xml version="1.0" encoding="utf-8"?><Error><Code>BlobAlreadyExists</Code><Message>The specified blob already exists.
RequestId:1</Message></Error>"#,
        );
        assert_eq!(c.as_deref(), Some("BlobAlreadyExists"));
        assert!(m.unwrap().starts_with("The specified blob already exists."));
        let (c, m) = parse_error_body(
            r#"{"odata.error":{"code":"TableNotFound","message":{"lang":"en-US","value":"The table specified does not exist.\nRequestId:x"}}}"#,
        );
        assert_eq!(c.as_deref(), Some("TableNotFound"));
        assert!(m.unwrap().starts_with("The table specified"));
        assert_eq!(parse_error_body(""), (None, None));
    }

    #[test]
    fn service_error_prefers_header_code_and_reads_retry_after() {
        let mut h = HeaderMap::new();
        h.insert("x-ms-error-code", HeaderValue::from_static("ServerBusy"));
        h.insert("x-ms-retry-after-ms", HeaderValue::from_static("1500"));
        let e = service_error("Op", StatusCode::SERVICE_UNAVAILABLE, &h, b"");
        assert_eq!(e.code(), Some("ServerBusy"));
        assert_eq!(e.retry_after(), Some(Duration::from_millis(1500)));
        assert!(e.is_retryable());
        assert_eq!(
            e.to_string(),
            "Op: HTTP 503 ServerBusy: Service Unavailable"
        );
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
    }

    #[test]
    fn strict_encoding() {
        assert_eq!(encode("a b'c=d+e/f%g~h"), "a%20b%27c%3Dd%2Be%2Ff%25g~h");
        assert_eq!(encode("é"), "%C3%A9");
    }
}
