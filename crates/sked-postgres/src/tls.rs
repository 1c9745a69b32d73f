//! TLS to PostgreSQL with rustls, with libpq's `sslmode` meanings:
//!
//! - `disable`: never; `prefer` (the default): if the server offers it; `require`: always.
//!   None of these checks the server's certificate, as in libpq, except that `require` with a
//!   root certificate (`sslrootcert`, or `~/.postgresql/root.crt` when it exists) acts as
//!   `verify-ca`.
//! - `verify-ca`: always, and the certificate must chain to the root certificate.
//! - `verify-full`: as `verify-ca`, and the certificate must name the host connected to.
//!
//! `sslrootcert=system` trusts the Mozilla root programme's certificates (webpki-roots).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much TLS a connection asks for (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub(crate) fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "invalid sslmode {other:?}: use disable, prefer, require, verify-ca or verify-full"
                ));
            }
        })
    }

    /// The mode tokio-postgres negotiates with: whether to ask for TLS and whether to insist.
    pub(crate) fn negotiation(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }
}

/// Where the trusted root certificates come from (libpq's `sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    File(PathBuf),
    System,
}

impl RootCert {
    pub(crate) fn parse(s: &str) -> RootCert {
        if s == "system" {
            RootCert::System
        } else {
            RootCert::File(PathBuf::from(s))
        }
    }
}

/// A connection's TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub(crate) mode: SslMode,
    pub(crate) root_cert: Option<RootCert>,
}

/// libpq's default root certificate file.
fn default_root_cert() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = PathBuf::from(home).join(".postgresql/root.crt");
    path.exists().then_some(path)
}

impl TlsSettings {
    /// The connector for these settings. Fails when a verifying mode has no root certificate
    /// or the file cannot be read.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let root = || {
            self.root_cert
                .clone()
                .or_else(|| default_root_cert().map(RootCert::File))
        };
        let (chain, check_name) = match self.mode {
            SslMode::Disable | SslMode::Prefer => (None, false),
            SslMode::Require => (root(), false),
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let verify_full = self.mode == SslMode::VerifyFull;
                let Some(root) = root() else {
                    return Err(format!(
                        "sslmode={} needs the server's root certificate: give \
                         sslrootcert=PATH (or sslrootcert=system), or put it in \
                         ~/.postgresql/root.crt",
                        if verify_full {
                            "verify-full"
                        } else {
                            "verify-ca"
                        }
                    ));
                };
                (Some(root), verify_full)
            }
        };
        let verifier = Verifier {
            chain: chain.map(|r| webpki(&r, &provider)).transpose()?,
            check_name,
            provider: provider.clone(),
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// The standard verifier (chain and name) over the given roots.
fn webpki(
    root: &RootCert,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    let mut roots = RootCertStore::empty();
    match root {
        RootCert::System => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        RootCert::File(path) => {
            let unreadable = |e: &dyn std::fmt::Display| {
                format!("cannot read the root certificate {}: {e}", path.display())
            };
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))? {
                roots
                    .add(cert.map_err(|e| unreadable(&e))?)
                    .map_err(|e| unreadable(&e))?;
            }
            if roots.is_empty() {
                return Err(unreadable(&"no certificate in it"));
            }
        }
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("cannot set up TLS: {e}"))
}

/// Checks a server's certificate as far as the mode asks: not at all (encryption without
/// authentication, libpq's `prefer` and `require`), its chain (`verify-ca`), or its chain and
/// the host's name (`verify-full`). The handshake's signatures are checked in every mode.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // The standard verifier checks the chain before the name, so a name mismatch means
        // the chain was good.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
