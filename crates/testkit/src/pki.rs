//! A throw-away PKI for one control plane.
//!
//! One ECDSA P-256 CA signs the apiserver's serving certificate (SANs for loopback and the
//! in-cluster `kubernetes` service names), an admin client certificate in `system:masters`, and
//! a separate key signs service-account tokens. Keys never leave the control plane's directory
//! and the certificates live two days: long enough for a working day, short enough that a
//! leaked test directory is worthless soon.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Files written by [`generate`], all PEM.
#[derive(Clone, Debug)]
pub struct PkiFiles {
    /// The CA certificate clients trust.
    pub ca_cert: PathBuf,
    /// The CA key (kube-controller-manager signs CSRs with it).
    pub ca_key: PathBuf,
    /// The apiserver's serving certificate and key.
    pub apiserver_cert: PathBuf,
    /// See `apiserver_cert`.
    pub apiserver_key: PathBuf,
    /// The admin client certificate (`O=system:masters`) and key.
    pub admin_cert: PathBuf,
    /// See `admin_cert`.
    pub admin_key: PathBuf,
    /// Service-account token signing key (private) and its public half.
    pub sa_key: PathBuf,
    /// See `sa_key`.
    pub sa_pub: PathBuf,
}

/// Why the PKI could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Key or certificate generation failed.
    #[error("failed to generate {what}: {source}")]
    Generate {
        /// Which item.
        what: &'static str,
        /// The underlying error.
        source: rcgen::Error,
    },
    /// Writing a file failed.
    #[error("failed to write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

fn validity(params: &mut CertificateParams) {
    let now = rcgen::date_time_ymd(1970, 1, 1)
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
    // Backdate an hour: the control plane may start in the same second on a skewed clock.
    params.not_before = now - std::time::Duration::from_secs(3600);
    params.not_after = now + std::time::Duration::from_secs(2 * 24 * 3600);
}

fn named(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

/// Generates the PKI into `dir` (created if needed).
pub fn generate(dir: &Path) -> Result<PkiFiles, PkiError> {
    let gen_err = |what| move |source| PkiError::Generate { what, source };
    std::fs::create_dir_all(dir).map_err(|source| PkiError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let write = |name: &str, pem: String| -> Result<PathBuf, PkiError> {
        let path = dir.join(name);
        std::fs::write(&path, pem).map_err(|source| PkiError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    };

    let ca_key = KeyPair::generate().map_err(gen_err("CA key"))?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = named("hangar-testbed-ca", None);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut ca);
    let ca_cert = ca.self_signed(&ca_key).map_err(gen_err("CA certificate"))?;
    let ca_cert_path = write("ca.crt", ca_cert.pem())?;
    let ca_key_path = write("ca.key", ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca, ca_key);

    let leaf = |cn: &str,
                org: Option<&str>,
                usage: ExtendedKeyUsagePurpose,
                sans: Vec<SanType>|
     -> Result<(String, String), PkiError> {
        let key = KeyPair::generate().map_err(gen_err("leaf key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = named(cn, org);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        params.subject_alt_names = sans;
        validity(&mut params);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(gen_err("leaf certificate"))?;
        Ok((cert.pem(), key.serialize_pem()))
    };

    let mut sans = vec![
        SanType::IpAddress([127, 0, 0, 1].into()),
        SanType::IpAddress([10, 0, 0, 1].into()),
    ];
    for dns in [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ] {
        sans.push(SanType::DnsName(dns.try_into().map_err(gen_err("SAN"))?));
    }
    let (api_cert, api_key) = leaf(
        "kube-apiserver",
        None,
        ExtendedKeyUsagePurpose::ServerAuth,
        sans,
    )?;
    let (admin_cert, admin_key) = leaf(
        "hangar-admin",
        Some("system:masters"),
        ExtendedKeyUsagePurpose::ClientAuth,
        vec![],
    )?;

    // ECDSA service-account keys are accepted by the apiserver (ES256 tokens).
    let sa = KeyPair::generate().map_err(gen_err("service-account key"))?;

    Ok(PkiFiles {
        ca_cert: ca_cert_path,
        ca_key: ca_key_path,
        apiserver_cert: write("apiserver.crt", api_cert)?,
        apiserver_key: write("apiserver.key", api_key)?,
        admin_cert: write("admin.crt", admin_cert)?,
        admin_key: write("admin.key", admin_key)?,
        sa_key: write("sa.key", sa.serialize_pem())?,
        sa_pub: write("sa.pub", sa.public_key_pem())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_file_as_pem() {
        let dir = std::env::temp_dir().join(format!("hangar-pki-test-{}", std::process::id()));
        let files = generate(&dir).unwrap();
        for (path, marker) in [
            (&files.ca_cert, "BEGIN CERTIFICATE"),
            (&files.apiserver_cert, "BEGIN CERTIFICATE"),
            (&files.admin_cert, "BEGIN CERTIFICATE"),
            (&files.admin_key, "PRIVATE KEY"),
            (&files.sa_key, "PRIVATE KEY"),
            (&files.sa_pub, "BEGIN PUBLIC KEY"),
        ] {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(text.contains(marker), "{} lacks {marker}", path.display());
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
