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
//!
//! Where no certificate is checked, the handshake's signature is still checked, with the
//! certificate's public key alone: so a certificate of X.509 version 1, which the chain
//! checks refuse, serves `prefer` and `require` as it does with libpq.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
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
        if self.chain.is_none() {
            return signed_with_key_of(cert, message, dss, algorithms);
        }
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        if self.chain.is_none() {
            let spki = public_key_of(cert)?;
            return rustls::crypto::verify_tls13_signature_with_raw_key(
                message, &spki, dss, algorithms,
            );
        }
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The public key of `cert`, whatever its X.509 version.
fn public_key_of<'a>(
    cert: &'a CertificateDer<'_>,
) -> Result<SubjectPublicKeyInfoDer<'a>, rustls::Error> {
    subject_public_key_info(cert)
        .map(SubjectPublicKeyInfoDer::from)
        .ok_or(rustls::Error::InvalidCertificate(
            CertificateError::BadEncoding,
        ))
}

/// Checks that `message` was signed with the key of `cert`, whatever the certificate's X.509
/// version (webpki reads only version 3 certificates, which a chain check needs; where nothing
/// is checked but the signature, a version 1 certificate is as good). TLS 1.2's scheme may
/// map to several algorithms (it names no curve): each is tried, as rustls does.
fn signed_with_key_of(
    cert: &CertificateDer<'_>,
    message: &[u8],
    dss: &DigitallySignedStruct,
    algorithms: &rustls::crypto::WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let spki = public_key_of(cert)?;
    let key = webpki::RawPublicKeyEntity::try_from(&spki)
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, algs)| *algs)
        .ok_or(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
    for alg in candidates {
        match key.verify_signature(*alg, message, dss.signature()) {
            Ok(()) => return Ok(HandshakeSignatureValid::assertion()),
            Err(webpki::Error::UnsupportedSignatureAlgorithmForPublicKeyContext(_)) => {}
            Err(_) => {
                return Err(rustls::Error::InvalidCertificate(
                    CertificateError::BadSignature,
                ));
            }
        }
    }
    Err(rustls::Error::InvalidCertificate(
        CertificateError::BadSignature,
    ))
}

/// The DER of a certificate's `subjectPublicKeyInfo`, read by hand so that every X.509
/// version is read: `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version
/// OPTIONAL, serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, … } … }`.
fn subject_public_key_info(cert: &[u8]) -> Option<&[u8]> {
    /// One DER element at the start of `der`: its tag, its whole encoding, its contents.
    fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = der.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |len, &b| (len << 8) | usize::from(b));
            (len, &rest[n..])
        };
        let contents = rest.get(..len)?;
        let whole = &der[..der.len() - rest.len() + len];
        Some((tag, whole, contents))
    }
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, _, certificate) = element(cert)? else {
        return None;
    };
    let (SEQUENCE, _, mut tbs) = element(certificate)? else {
        return None;
    };
    // The version, present from version 2 on.
    if let Some((0xa0, whole, _)) = element(tbs) {
        tbs = &tbs[whole.len()..];
    }
    // serialNumber, signature, issuer, validity, subject.
    for _ in 0..5 {
        let (_, whole, _) = element(tbs)?;
        tbs = &tbs[whole.len()..];
    }
    match element(tbs)? {
        (SEQUENCE, whole, _) => Some(whole),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two certificates for one P-256 key, made with `openssl x509 -req` (version 1, no
    /// extensions) and `openssl req -x509` (version 3), and the key's public half.
    const V1: &str = "-----BEGIN CERTIFICATE-----\nMIIBFjCBvQIUN55jgmOKSL7ViAYNbzYTUJS2oJ8wCgYIKoZIzj0EAwIwDTELMAkG\nA1UEAwwCdjEwIBcNMjYxMTI5MDMyNzI4WhgPMjEyNjExMDUwMzI3MjhaMA0xCzAJ\nBgNVBAMMAnYxMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAElpHqf4TAh2PCmg4s\nC9VRZZjevwdUAcxAdYdxqhxhd+idbiI0wlFmxFMilBJCBNp/6c5T1Juag0VFa0iO\nF2UD7DAKBggqhkjOPQQDAgNIADBFAiAoz3PJGXpaoeeK+kq5L2u7yNN927EaOpL4\nGB5m2CuxQAIhALwQtyppXDHJ4PEf95l8Mib2Tcw7m2q08ggCbj7QuWJj\n-----END CERTIFICATE-----\n";
    const V3: &str = "-----BEGIN CERTIFICATE-----\nMIIBcTCCARegAwIBAgIUDXPM7SdkXunvxgvQgqvlknCVvb4wCgYIKoZIzj0EAwIw\nDTELMAkGA1UEAwwCdjMwIBcNMjYxMTI5MDMyNzI4WhgPMjEyNjExMDUwMzI3Mjha\nMA0xCzAJBgNVBAMMAnYzMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAElpHqf4TA\nh2PCmg4sC9VRZZjevwdUAcxAdYdxqhxhd+idbiI0wlFmxFMilBJCBNp/6c5T1Jua\ng0VFa0iOF2UD7KNTMFEwHQYDVR0OBBYEFKNoLMUtL0FroIXMQNLzKdC49PTyMB8G\nA1UdIwQYMBaAFKNoLMUtL0FroIXMQNLzKdC49PTyMA8GA1UdEwEB/wQFMAMBAf8w\nCgYIKoZIzj0EAwIDSAAwRQIhAK8dS8Pbti7hkXXC6MD2kOJgeqLufwu8oWUV4KeM\npxRfAiAnVN8kG2tiKgEZS1hmaZKOy1CAbdEN/CKkzRdz5eSG0Q==\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAElpHqf4TAh2PCmg4sC9VRZZjevwdU\nAcxAdYdxqhxhd+idbiI0wlFmxFMilBJCBNp/6c5T1Juag0VFa0iOF2UD7A==\n-----END PUBLIC KEY-----\n";

    #[test]
    fn the_public_key_is_read_from_certificates_of_either_version() {
        let key = SubjectPublicKeyInfoDer::from_pem_slice(KEY.as_bytes()).unwrap();
        for pem in [V1, V3] {
            let cert = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
            assert_eq!(subject_public_key_info(&cert), Some(key.as_ref()));
        }
        // webpki, which the chain checks use, reads only the second.
        let v1 = CertificateDer::from_pem_slice(V1.as_bytes()).unwrap();
        assert!(webpki::EndEntityCert::try_from(&v1).is_err());
    }

    #[test]
    fn a_cut_or_garbled_certificate_has_no_public_key() {
        let cert = CertificateDer::from_pem_slice(V1.as_bytes()).unwrap();
        for end in [0, 1, 2, 10, 100, cert.len() - 80] {
            assert_eq!(subject_public_key_info(&cert[..end]), None, "{end} bytes");
        }
        assert_eq!(
            subject_public_key_info(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            None
        );
        assert_eq!(subject_public_key_info(&[0x02, 0x01, 0x00]), None);
    }
}
