//! The webhook's own PKI: a CA and a serving certificate, what is stored of them, and when
//! they are renewed — pure functions of the stored state, the names to serve and `now`.
//!
//! - The CA lives [`CertPolicy::ca_validity`] (default one year), the serving ("leaf")
//!   certificate [`CertPolicy::leaf_validity`] (default 90 days), never beyond its CA.
//! - Each is renewed once less than a third of its validity remains ([`plan`]); a leaf is also
//!   renewed when the names it must serve changed. Renewing the CA renews the leaf.
//! - After a CA renewal the old CA stays in the bundle ([`Stored::bundle`]) until it expires, so
//!   the apiserver keeps trusting replicas that still serve a leaf of the old CA.
//!
//! Validity times are stored next to the PEM (Secret annotations), so nothing has to parse
//! X.509 to decide. Keys are ECDSA P-256 (rcgen on ring).

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Common name of the CA; also what ties a stored CA key back to issuer parameters.
pub const CA_COMMON_NAME: &str = "hangar-webhook-ca";

/// How long certificates live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertPolicy {
    /// Validity of the CA.
    pub ca_validity: Duration,
    /// Validity of the serving certificate.
    pub leaf_validity: Duration,
}

impl Default for CertPolicy {
    fn default() -> Self {
        Self {
            ca_validity: Duration::from_secs(365 * 24 * 3600),
            leaf_validity: Duration::from_secs(90 * 24 * 3600),
        }
    }
}

/// A certificate and its key, PEM, with its validity.
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key, PEM (never logged: see the `Debug` impl).
    pub key_pem: String,
    /// Start of validity, seconds since the epoch.
    pub not_before: u64,
    /// End of validity, seconds since the epoch.
    pub not_after: u64,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// Everything stored about the PKI (in the `hangar-webhook-tls` Secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The current CA.
    pub ca: Issued,
    /// The serving certificate, signed by `ca`.
    pub leaf: Issued,
    /// The names (DNS names or IP addresses) `leaf` serves.
    pub names: Vec<String>,
    /// The CA before the last CA renewal (certificate and end of validity), still trusted.
    pub previous_ca: Option<(String, u64)>,
}

impl Stored {
    /// The PEM bundle the webhook configurations trust: the current CA, and the previous one
    /// while it is valid at `now`.
    pub fn bundle(&self, now: SystemTime) -> String {
        let mut out = self.ca.cert_pem.clone();
        if let Some((pem, not_after)) = &self.previous_ca
            && *not_after > secs(now)
        {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(pem);
        }
        out
    }
}

/// What to do with the stored PKI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Keep everything.
    Keep,
    /// Issue a new serving certificate from the current CA.
    Leaf,
    /// Issue a new CA and serving certificate (nothing stored, or the CA is due).
    All,
}

/// Seconds since the epoch.
pub fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Whether a certificate valid from `not_before` to `not_after` is due at `now`: less than a
/// third of its validity left (or not yet valid, which means a clock went backwards).
pub fn due(not_before: u64, not_after: u64, now: u64) -> bool {
    let lifetime = not_after.saturating_sub(not_before);
    now < not_before || not_after.saturating_sub(now) < lifetime / 3
}

/// The decision: renew the CA when due, else the leaf when due or when `names` changed.
pub fn plan(stored: Option<&Stored>, names: &[String], now: SystemTime) -> Renewal {
    let Some(s) = stored else {
        return Renewal::All;
    };
    let now = secs(now);
    if due(s.ca.not_before, s.ca.not_after, now) {
        return Renewal::All;
    }
    if due(s.leaf.not_before, s.leaf.not_after, now) || s.names != names {
        return Renewal::Leaf;
    }
    Renewal::Keep
}

/// Why a certificate could not be issued.
#[derive(Debug, thiserror::Error)]
#[error("failed to {what}: {source}")]
pub struct CertError {
    what: &'static str,
    source: rcgen::Error,
}

fn err(what: &'static str) -> impl FnOnce(rcgen::Error) -> CertError {
    move |source| CertError { what, source }
}

fn set_validity(params: &mut CertificateParams, not_before: u64, not_after: u64) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(not_before);
    params.not_after = epoch + Duration::from_secs(not_after);
}

fn ca_params(not_before: u64, not_after: u64) -> CertificateParams {
    let mut ca = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut ca, not_before, not_after);
    ca
}

/// Carries out `renewal` (not [`Renewal::Keep`]) on `stored` at `now`.
pub fn renew(
    stored: Option<&Stored>,
    renewal: Renewal,
    names: &[String],
    policy: &CertPolicy,
    now: SystemTime,
) -> Result<Stored, CertError> {
    let now = secs(now);
    // Backdated a little: the apiserver's clock may lag ours.
    let not_before = now.saturating_sub(300);
    let (ca, previous_ca) = match (stored, renewal) {
        (Some(s), Renewal::Leaf | Renewal::Keep) => (s.ca.clone(), s.previous_ca.clone()),
        (old, _) => {
            let key = KeyPair::generate().map_err(err("generate the CA key"))?;
            let not_after = now + policy.ca_validity.as_secs();
            let cert = ca_params(not_before, not_after)
                .self_signed(&key)
                .map_err(err("sign the CA certificate"))?;
            let ca = Issued {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
                not_before,
                not_after,
            };
            (ca, old.map(|o| (o.ca.cert_pem.clone(), o.ca.not_after)))
        }
    };
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(err("read the CA key"))?;
    let issuer = Issuer::new(ca_params(ca.not_before, ca.not_after), ca_key);

    let key = KeyPair::generate().map_err(err("generate the serving key"))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "hangar-webhook");
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    for name in names {
        params.subject_alt_names.push(match name.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                name.clone()
                    .try_into()
                    .map_err(err("use a name as a DNS SAN"))?,
            ),
        });
    }
    let not_after = (now + policy.leaf_validity.as_secs()).min(ca.not_after);
    set_validity(&mut params, not_before, not_after);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(err("sign the serving certificate"))?;
    Ok(Stored {
        leaf: Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_before,
            not_after,
        },
        ca,
        names: names.to_vec(),
        previous_ca,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 24 * 3600;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    fn names() -> Vec<String> {
        vec![
            "127.0.0.1".into(),
            "hangar-webhook.hangar-system.svc".into(),
        ]
    }

    #[test]
    fn due_when_less_than_a_third_remains() {
        // 90-day certificate issued at day 0: due from day 60 on.
        for (now_day, is_due) in [
            (0, false),
            (59, false),
            (60, false),
            (61, true),
            (100, true),
        ] {
            assert_eq!(due(0, 90 * DAY, now_day * DAY), is_due, "day {now_day}");
        }
        // A clock that went back before the start renews.
        assert!(due(10 * DAY, 100 * DAY, 5 * DAY));
    }

    #[test]
    fn the_plan_follows_the_ca_then_the_leaf_then_the_names() {
        let policy = CertPolicy::default();
        let t0 = 1_900_000_000;
        assert_eq!(plan(None, &names(), at(t0)), Renewal::All);
        let s = renew(None, Renewal::All, &names(), &policy, at(t0)).unwrap();
        assert_eq!(plan(Some(&s), &names(), at(t0)), Renewal::Keep);
        assert_eq!(plan(Some(&s), &names(), at(t0 + 59 * DAY)), Renewal::Keep);
        assert_eq!(plan(Some(&s), &names(), at(t0 + 61 * DAY)), Renewal::Leaf);
        assert_eq!(
            plan(Some(&s), &["other.svc".to_owned()], at(t0)),
            Renewal::Leaf
        );
        // The CA (365 days) is due after 244 days, whatever the leaf.
        let mut fresh_leaf = s.clone();
        fresh_leaf.leaf.not_before = t0 + 240 * DAY;
        fresh_leaf.leaf.not_after = t0 + 330 * DAY;
        assert_eq!(
            plan(Some(&fresh_leaf), &names(), at(t0 + 245 * DAY)),
            Renewal::All
        );
    }

    #[test]
    fn a_leaf_renewal_keeps_the_ca_and_a_ca_renewal_keeps_the_old_ca_trusted() {
        let policy = CertPolicy::default();
        let t0 = 1_900_000_000;
        let first = renew(None, Renewal::All, &names(), &policy, at(t0)).unwrap();
        assert!(first.previous_ca.is_none());
        assert_eq!(first.bundle(at(t0)), first.ca.cert_pem);
        assert!(first.leaf.not_after <= first.ca.not_after);

        let leaf = renew(
            Some(&first),
            Renewal::Leaf,
            &names(),
            &policy,
            at(t0 + 61 * DAY),
        )
        .unwrap();
        assert_eq!(leaf.ca, first.ca);
        assert_ne!(leaf.leaf.cert_pem, first.leaf.cert_pem);

        let t1 = t0 + 245 * DAY;
        let all = renew(Some(&leaf), Renewal::All, &names(), &policy, at(t1)).unwrap();
        assert_ne!(all.ca.cert_pem, first.ca.cert_pem);
        let bundle = all.bundle(at(t1));
        assert!(bundle.contains(&all.ca.cert_pem) && bundle.contains(&first.ca.cert_pem));
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
        // Once the old CA has expired it leaves the bundle.
        assert_eq!(all.bundle(at(first.ca.not_after + 1)), all.ca.cert_pem);
    }

    #[test]
    fn the_leaf_verifies_against_the_bundle_for_its_names() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let policy = CertPolicy::default();
        let now = SystemTime::now();
        let first = renew(None, Renewal::All, &names(), &policy, now).unwrap();
        // A CA renewal: the new leaf must verify against the bundle (new CA first).
        let s = renew(Some(&first), Renewal::All, &names(), &policy, now).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(s.bundle(now).as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(s.leaf.cert_pem.as_bytes()).unwrap();
        for name in ["127.0.0.1", "hangar-webhook.hangar-system.svc"] {
            verifier
                .verify_server_cert(
                    &leaf,
                    &[],
                    &ServerName::try_from(name).unwrap(),
                    &[],
                    UnixTime::now(),
                )
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // The first CA's leaf still verifies too: the old CA is in the bundle.
        let old_leaf = CertificateDer::from_pem_slice(first.leaf.cert_pem.as_bytes()).unwrap();
        verifier
            .verify_server_cert(
                &old_leaf,
                &[],
                &ServerName::try_from("127.0.0.1").unwrap(),
                &[],
                UnixTime::now(),
            )
            .unwrap();
    }

    #[test]
    fn debug_never_shows_keys() {
        let s = renew(
            None,
            Renewal::All,
            &names(),
            &CertPolicy::default(),
            SystemTime::now(),
        )
        .unwrap();
        let text = format!("{s:?}");
        assert!(!text.contains("PRIVATE KEY"), "{text}");
    }
}
