//! Throwaway TLS for tests: a CA made up on the spot and a server certificate it signed
//! for `localhost` and `127.0.0.1`, written to a temporary directory. Azurite's OAuth
//! mode (bearer tokens need HTTPS) and the tests' fake Entra ID token endpoint serve it;
//! clients trust the CA (`tablevault_azure::pipeline::trust_ca_certificate`). One per
//! process, made on first use.

use std::path::PathBuf;
use std::sync::OnceLock;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// A CA and a server certificate for the loopback address, in PEM and in files.
#[derive(Debug)]
pub struct TestCertificate {
    /// The CA certificate clients trust (PEM).
    pub ca_pem: String,
    /// The server certificate (PEM).
    pub cert_pem: String,
    /// The server's private key (PEM, PKCS#8).
    pub key_pem: String,
    /// File holding `ca_pem`.
    pub ca_path: PathBuf,
    /// File holding `cert_pem`.
    pub cert_path: PathBuf,
    /// File holding `key_pem`.
    pub key_path: PathBuf,
}

impl TestCertificate {
    /// The process's test certificate, generated and written on first use.
    pub fn shared() -> &'static TestCertificate {
        static CERT: OnceLock<TestCertificate> = OnceLock::new();
        CERT.get_or_init(|| Self::generate().expect("generating a test certificate"))
    }

    fn generate() -> Result<TestCertificate, Box<dyn std::error::Error>> {
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "tablevault throwaway test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let mut server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])?;
        server
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let key = KeyPair::generate()?;
        let cert = server.signed_by(&key, &ca)?;

        let dir = std::env::temp_dir().join(format!("tablevault-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let (ca_pem, cert_pem, key_pem) = (ca.pem(), cert.pem(), key.serialize_pem());
        let write = |name: &str, text: &str| -> std::io::Result<PathBuf> {
            let p = dir.join(name);
            std::fs::write(&p, text)?;
            Ok(p)
        };
        Ok(TestCertificate {
            ca_path: write("ca.pem", &ca_pem)?,
            cert_path: write("cert.pem", &cert_pem)?,
            key_path: write("key.pem", &key_pem)?,
            ca_pem,
            cert_pem,
            key_pem,
        })
    }
}
