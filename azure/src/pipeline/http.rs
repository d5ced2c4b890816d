//! The one HTTP client of the process, shared by every storage client and by the Entra ID
//! credentials: one connection pool, one TLS set-up. Besides the public roots it trusts
//! extra CA certificates (PEM) from `TABLEVAULT_CA_CERT` or [`trust_ca_certificate`], for
//! private endpoints behind a TLS-inspecting proxy, and for tests with a throwaway CA.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::config::ConfigError;

/// Environment variable naming a PEM file of extra CA certificates to trust.
pub const CA_CERT_ENV: &str = "TABLEVAULT_CA_CERT";

/// Limit on establishing a connection, for every request of the process.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct State {
    client: Option<reqwest::Client>,
    /// Extra CAs added through [`trust_ca_certificate`].
    extra: Vec<reqwest::Certificate>,
}

fn state() -> &'static Mutex<State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(Default::default)
}

fn parse_bundle(pem: &[u8], origin: &str) -> Result<Vec<reqwest::Certificate>, ConfigError> {
    let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
        ConfigError::NotConfigured(format!("{origin} is not a PEM certificate bundle: {e}"))
    })?;
    if certs.is_empty() {
        return Err(ConfigError::NotConfigured(format!(
            "{origin} holds no PEM certificate"
        )));
    }
    Ok(certs)
}

/// Trusts the CA certificates of a PEM bundle for every connection made from now on
/// (clients built before keep their trust). Process-wide, like `TABLEVAULT_CA_CERT`.
pub fn trust_ca_certificate(pem: &[u8]) -> Result<(), ConfigError> {
    let certs = parse_bundle(pem, "the CA certificate")?;
    let mut s = state().lock().expect("http state");
    s.extra.extend(certs);
    s.client = None;
    Ok(())
}

/// The process's HTTP client, built on first use. Per-attempt time limits are set on each
/// request.
pub(crate) fn shared_http_client() -> Result<reqwest::Client, ConfigError> {
    let mut s = state().lock().expect("http state");
    if let Some(c) = &s.client {
        return Ok(c.clone());
    }
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true);
    if let Some(path) = std::env::var_os(CA_CERT_ENV).filter(|p| !p.is_empty()) {
        let origin = format!("{CA_CERT_ENV} ({})", path.to_string_lossy());
        let pem = std::fs::read(&path)
            .map_err(|e| ConfigError::NotConfigured(format!("cannot read {origin}: {e}")))?;
        for c in parse_bundle(&pem, &origin)? {
            builder = builder.add_root_certificate(c);
        }
    }
    for c in &s.extra {
        builder = builder.add_root_certificate(c.clone());
    }
    let client = builder
        .build()
        .map_err(|e| ConfigError::NotConfigured(format!("HTTP client: {e}")))?;
    s.client = Some(client.clone());
    Ok(client)
}
