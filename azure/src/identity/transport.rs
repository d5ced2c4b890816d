//! The identity credentials' HTTP transport: `azure_core`'s [`HttpClient`] over the
//! process's one reqwest client, so token requests use the same TLS set-up (and trust the
//! same extra CA certificate, `TABLEVAULT_CA_CERT`) as storage requests, with no second
//! HTTP stack.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use azure_core::error::{Error, ErrorKind};
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{AsyncRawResponse, Body, HttpClient, Method, Request, Transport};

/// Limit on one token request, from connecting to the last byte.
const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a credential's last token request got no answer (host, and the connection or TLS
/// cause), or `None` once one was answered. The SDK reports a token endpoint it could not
/// reach, after its retries, only as "retry policy expired"; the token cache adds this.
pub(crate) type LastFailure = Arc<Mutex<Option<String>>>;

/// `azure_core`'s transport over our reqwest client.
#[derive(Debug, Clone)]
pub(crate) struct ReqwestTransport {
    client: reqwest::Client,
    last_failure: LastFailure,
}

impl ReqwestTransport {
    /// The transport over the process's shared client, noting its failures in `last`.
    pub(crate) fn shared(last_failure: LastFailure) -> Result<Transport, crate::ConfigError> {
        let client = crate::pipeline::http::shared_http_client()?;
        Ok(Transport::new(Arc::new(ReqwestTransport {
            client,
            last_failure,
        })))
    }

    fn note(&self, failure: Option<String>) {
        *self.last_failure.lock().expect("last token failure") = failure;
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
            .client
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
        let response = self.client.execute(req.body(body).build().map_err(|e| {
            Error::with_message(ErrorKind::Other, format!("building the token request: {e}"))
        })?);
        let host = crate::pipeline::host_and_port(request.url());
        let response = response.await.map_err(|e| {
            let kind = if e.is_connect() {
                ErrorKind::Connection
            } else {
                ErrorKind::Io
            };
            // No URL: a managed-identity URL carries no secret, but keep errors uniform.
            let detail = crate::error::describe_reqwest(&host, e);
            self.note(Some(detail.clone()));
            Error::with_message(kind, format!("token request failed: {detail}"))
        })?;
        self.note(None);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A token request that gets no answer is noted with its host and cause; one that is
    /// answered clears the note.
    #[tokio::test]
    async fn token_requests_without_an_answer_are_noted() {
        let last = LastFailure::default();
        let transport = ReqwestTransport {
            client: reqwest::Client::new(),
            last_failure: last.clone(),
        };
        // A port bound but not listening: it refuses every connection, and no test
        // running alongside can take it (as it could a port freed).
        let closed = tokio::net::TcpSocket::new_v4().unwrap();
        closed.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let port = closed.local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/tenant/oauth2/v2.0/token?secret=x");
        let request = Request::new(url.parse().unwrap(), Method::Post);
        assert!(transport.execute_request(&request).await.is_err());
        let noted = last.lock().unwrap().clone().expect("a note");
        assert!(noted.starts_with(&format!("127.0.0.1:{port}: ")), "{noted}");
        assert!(!noted.contains("secret"), "no URL: {noted}");
        // An answer, even an error status, clears it.
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut s, _) = server.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
                .await;
        });
        let request = Request::new(
            format!("http://{addr}/token").parse().unwrap(),
            Method::Post,
        );
        let response = transport.execute_request(&request).await.unwrap();
        assert_eq!(u16::from(response.status()), 500);
        assert_eq!(*last.lock().unwrap(), None);
    }
}
