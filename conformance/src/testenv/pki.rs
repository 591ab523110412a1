//! Key material for the test control plane, generated fresh per `TestEnv`
//! with Rust crates (`rcgen`): a CA, serving certificates signed by it, and
//! the service-account token signing key the apiserver requires.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};
use std::net::{IpAddr, Ipv4Addr};

/// A certificate authority that signs every serving certificate of one `TestEnv`.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

/// A PEM-encoded certificate and its private key.
pub struct ServingCert {
    /// Certificate chain (leaf only), PEM.
    pub cert_pem: String,
    /// PKCS#8 private key, PEM.
    pub key_pem: String,
}

impl CertificateAuthority {
    /// Generates a fresh ECDSA P-256 CA.
    pub fn generate() -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "buzz-testenv-ca");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a serving certificate for loopback (`127.0.0.1`, `localhost`)
    /// plus any extra DNS names.
    pub fn issue_serving(&self, common_name: &str, dns: &[&str]) -> Result<ServingCert, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut names: Vec<String> = vec!["localhost".into()];
        names.extend(dns.iter().map(|s| s.to_string()));
        let mut params = CertificateParams::new(names)?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl CertificateAuthority {
    /// Issues a client certificate for `common_name` in `organization` (the
    /// apiserver maps them to a user and a group).
    pub fn issue_client(&self, common_name: &str, organization: &str) -> Result<ServingCert, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        dn.push(DnType::OrganizationName, organization);
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The service-account token signing key: PKCS#8 private key PEM and its
/// public half, as `--service-account-signing-key-file` / `--service-account-key-file` take them.
pub fn service_account_key() -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
