//! A fake Microsoft Entra ID token endpoint over HTTPS (the throwaway test certificate):
//! answers `POST /{tenant}/oauth2/v2.0/token` with an unsigned JWT for Azure Storage,
//! counts requests, and checks the client secret or records the client assertion
//! (workload identity's federated token). Azurite checks a token's issuer, audience and
//! lifetime but not its signature, so these tokens are accepted by its OAuth mode.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pki_types::pem::PemObject;
use tablevault_dev::tls::TestCertificate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, pki_types};

/// The tenant the fake issues tokens for.
pub const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// The application (client) id it expects.
pub const CLIENT_ID: &str = "5e0d2b9c-0f6a-4f6e-9d1b-1c2d3e4f5a6b";
/// The object id put in its tokens.
pub const OBJECT_ID: &str = "0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e";
/// The client secret it accepts.
pub const SECRET: &str = "fake-entra-client-secret-value";

/// What the fake endpoint saw and how it answers.
#[derive(Debug)]
pub struct Shared {
    /// Token requests answered.
    pub requests: AtomicUsize,
    /// Lifetime of the tokens it issues (`expires_in`), seconds.
    pub expires_in: AtomicU64,
    /// Audience of the tokens it issues.
    pub audience: Mutex<String>,
    /// The last client assertion it received (workload identity).
    pub last_assertion: Mutex<Option<String>>,
}

/// A running fake token endpoint; stops when dropped.
pub struct FakeEntra {
    /// The authority host to configure (`https://127.0.0.1:PORT`).
    pub authority: String,
    /// Counters and settings.
    pub shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeEntra {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An unsigned JWT like Entra ID's for Azure Storage.
pub fn mint_token(audience: &str, lifetime_s: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let payload = serde_json::json!({
        "aud": audience,
        "iss": format!("https://sts.windows.net/{TENANT}/"),
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + lifetime_s,
        "appid": CLIENT_ID,
        "oid": OBJECT_ID,
        "tid": TENANT,
    });
    let payload = URL_SAFE_NO_PAD.encode(payload.to_string());
    format!("{header}.{payload}.c2lnbmF0dXJl")
}

impl FakeEntra {
    /// Starts the endpoint on a free loopback port.
    pub async fn start() -> FakeEntra {
        let cert = TestCertificate::shared();
        let certs = vec![
            pki_types::CertificateDer::from_pem_slice(cert.cert_pem.as_bytes())
                .expect("test certificate"),
        ];
        let key =
            pki_types::PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("test key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("TLS config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            requests: AtomicUsize::new(0),
            expires_in: AtomicU64::new(3600),
            audience: Mutex::new("https://storage.azure.com".into()),
            last_assertion: Mutex::new(None),
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, s) = (acceptor.clone(), s.clone());
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let _ = serve(&mut tls, &s).await;
                    }
                });
            }
        });
        FakeEntra {
            authority: format!("https://127.0.0.1:{port}"),
            shared,
            task,
        }
    }

    /// Token requests answered so far.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }
}

/// Answers requests on one connection until it closes.
async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    io: &mut S,
    shared: &Shared,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    loop {
        // Read one request: headers, then Content-Length bytes of body.
        let (head_end, length) = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (i + 4, length);
            }
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
        buf.drain(..head_end + length);
        let (status, reply) = answer(&head, &body, shared);
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
            reply.len()
        );
        io.write_all(response.as_bytes()).await?;
        io.flush().await?;
    }
}

fn answer(head: &str, body: &str, shared: &Shared) -> (&'static str, String) {
    let path = head.split_whitespace().nth(1).unwrap_or("");
    let form: Vec<(String, String)> = url_decode_form(body);
    let field = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let error = |code: &str, why: &str| {
        (
            "400 Bad Request",
            serde_json::json!({"error": code, "error_description": why, "error_codes": [7000215]})
                .to_string(),
        )
    };
    if path != format!("/{TENANT}/oauth2/v2.0/token") {
        return error("invalid_request", "unknown path");
    }
    if field("client_id") != Some(CLIENT_ID) || field("grant_type") != Some("client_credentials") {
        return error("unauthorized_client", "wrong client id or grant");
    }
    match (field("client_secret"), field("client_assertion")) {
        (Some(SECRET), None) => {}
        (None, Some(a)) => *shared.last_assertion.lock().unwrap() = Some(a.to_string()),
        _ => {
            return error(
                "invalid_client",
                "AADSTS7000215: Invalid client secret provided.",
            );
        }
    }
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let expires_in = shared.expires_in.load(Ordering::SeqCst);
    let token = mint_token(&shared.audience.lock().unwrap(), expires_in);
    (
        "200 OK",
        serde_json::json!({
            "token_type": "Bearer",
            "expires_in": expires_in,
            "ext_expires_in": expires_in,
            "access_token": token,
        })
        .to_string(),
    )
}

/// `application/x-www-form-urlencoded` pairs.
fn url_decode_form(body: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let s = s.replace('+', " ");
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%'
                && i + 2 < bytes.len()
                && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
            {
                out.push(b);
                i += 3;
                continue;
            }
            out.push(bytes[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    body.split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}
