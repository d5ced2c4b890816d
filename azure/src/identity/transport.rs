//! The identity credentials' HTTP transport: `azure_core`'s [`HttpClient`] over the
//! process's one reqwest client, so token requests use the same TLS set-up (and trust the
//! same extra CA certificate, `TABLEVAULT_CA_CERT`) as storage requests, with no second
//! HTTP stack.

use std::sync::Arc;
use std::time::Duration;

use azure_core::error::{Error, ErrorKind};
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{AsyncRawResponse, Body, HttpClient, Method, Request, Transport};

/// Limit on one token request, from connecting to the last byte.
const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `azure_core`'s transport over our reqwest client.
#[derive(Debug, Clone)]
pub(crate) struct ReqwestTransport(reqwest::Client);

impl ReqwestTransport {
    /// The transport over the process's shared client.
    pub(crate) fn shared() -> Result<Transport, crate::ConfigError> {
        let client = crate::pipeline::http::shared_http_client()?;
        Ok(Transport::new(Arc::new(ReqwestTransport(client))))
    }
}

fn method(m: Method) -> reqwest::Method {
    match m {
        Method::Delete => reqwest::Method::DELETE,
        Method::Get => reqwest::Method::GET,
        Method::Head => reqwest::Method::HEAD,
        Method::Patch => reqwest::Method::PATCH,
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        // `Method` is non-exhaustive; the credentials only GET and POST.
        _ => reqwest::Method::GET,
    }
}

#[async_trait::async_trait]
impl HttpClient for ReqwestTransport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let mut req = self
            .0
            .request(method(request.method()), request.url().clone())
            .timeout(TOKEN_REQUEST_TIMEOUT);
        for (name, value) in request.headers().iter() {
            req = req.header(name.as_str(), value.as_str());
        }
        let body = match request.body() {
            Body::Bytes(b) => b.clone(),
            _ => {
                return Err(Error::with_message(
                    ErrorKind::Other,
                    "streaming request bodies are not supported for token requests",
                ));
            }
        };
        let response = self.0.execute(req.body(body).build().map_err(|e| {
            Error::with_message(ErrorKind::Other, format!("building the token request: {e}"))
        })?);
        let response = response.await.map_err(|e| {
            let kind = if e.is_connect() {
                ErrorKind::Connection
            } else {
                ErrorKind::Io
            };
            // No URL: a managed-identity URL carries no secret, but keep errors uniform.
            Error::with_message(kind, format!("token request failed: {}", e.without_url()))
        })?;
        let status = response.status().as_u16();
        let mut headers = Headers::new();
        for (k, v) in response.headers() {
            if let Ok(v) = v.to_str() {
                headers.insert(
                    HeaderName::from(k.as_str().to_owned()),
                    HeaderValue::from(v.to_owned()),
                );
            }
        }
        let bytes = response.bytes().await.map_err(|e| {
            Error::with_message(
                ErrorKind::Io,
                format!("reading the token response: {}", e.without_url()),
            )
        })?;
        Ok(AsyncRawResponse::from_bytes(status.into(), headers, bytes))
    }
}
