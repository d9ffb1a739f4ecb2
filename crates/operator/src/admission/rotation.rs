//! Keeping the webhook PKI in its Secret, the configurations' `caBundle` and the served
//! certificate in step, across replicas and restarts.
//!
//! One pass ([`CertManager::sync`]):
//! 1. read the Secret (`hangar-webhook-tls`); [`certs::plan`] decides at the injected `now`;
//! 2. if something is due, issue it and write the Secret: *create* when absent, *replace with
//!    the read `resourceVersion`* otherwise. Losing either race (409) means another replica
//!    wrote first: re-read and use its certificates. Every replica therefore serves what the
//!    Secret holds, and no two CAs are ever in use at once by accident;
//! 3. bring both webhook configurations' `caBundle` to the Secret's bundle (current CA plus,
//!    after a CA renewal, the previous one);
//! 4. only then load the Secret's serving certificate into the running server — so the
//!    apiserver already trusts the CA of any certificate this replica presents.
//!
//! [`CertManager::run`] repeats the pass whenever the Secret changes (a watch on that one
//! name) and at least every `interval`, so a certificate written by another replica is served
//! within moments, without a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};

use super::certs::{self, CertPolicy, Issued, Renewal, Stored};
use super::configurations::{self, Registration, Synced};
use super::tls::ReloadableCert;
use crate::context::Clock;

/// Default name of the Secret holding the PKI.
pub const DEFAULT_SECRET_NAME: &str = "hangar-webhook-tls";

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CERT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
const PREVIOUS_CA: &str = "ca-previous.crt";
const BUNDLE: &str = "ca-bundle.crt";
const A_CA_NOT_BEFORE: &str = "hangar.dev/ca-not-before";
const A_CA_NOT_AFTER: &str = "hangar.dev/ca-not-after";
const A_TLS_NOT_BEFORE: &str = "hangar.dev/tls-not-before";
const A_TLS_NOT_AFTER: &str = "hangar.dev/tls-not-after";
const A_TLS_NAMES: &str = "hangar.dev/tls-names";
const A_PREVIOUS_CA_NOT_AFTER: &str = "hangar.dev/previous-ca-not-after";

/// Why a pass failed (retried by [`CertManager::run`]).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Reading or writing the Secret failed.
    #[error("failed to {action} webhook TLS secret {secret}: {source}")]
    Secret {
        /// What was tried.
        action: &'static str,
        /// `namespace/name`.
        secret: String,
        /// The error.
        source: kube::Error,
    },
    /// Issuing failed.
    #[error(transparent)]
    Issue(#[from] certs::CertError),
    /// Updating a webhook configuration failed.
    #[error(transparent)]
    Configuration(#[from] configurations::ConfigurationError),
    /// The stored certificate could not be loaded.
    #[error("cannot serve the stored certificate: {0}")]
    Load(#[from] super::tls::LoadError),
    /// Other replicas kept winning the write race.
    #[error("webhook TLS secret {0} kept changing while it was being renewed")]
    Contended(String),
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncOutcome {
    /// What this replica renewed (Keep when nothing, or when another replica won).
    pub renewed: Renewal,
    /// The configurations' state (mutating, validating).
    pub configurations: [Synced; 2],
    /// Whether a different certificate was loaded into the server.
    pub reloaded: bool,
    /// The bundle the configurations now carry.
    pub bundle: String,
}

/// Owns the PKI Secret for one webhook server.
pub struct CertManager {
    client: Client,
    namespace: String,
    secret_name: String,
    names: Vec<String>,
    policy: CertPolicy,
    clock: Arc<dyn Clock>,
    registration: Registration,
    cert: Arc<ReloadableCert>,
}

impl std::fmt::Debug for CertManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertManager")
            .field(
                "secret",
                &format!("{}/{}", self.namespace, self.secret_name),
            )
            .field("names", &self.names)
            .field("policy", &self.policy)
            .field("registration", &self.registration)
            .finish_non_exhaustive()
    }
}

impl CertManager {
    /// A manager of Secret `namespace/secret_name` for a server presenting `cert`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        secret_name: impl Into<String>,
        policy: CertPolicy,
        clock: Arc<dyn Clock>,
        registration: Registration,
        cert: Arc<ReloadableCert>,
    ) -> Self {
        Self {
            names: registration.endpoint.certificate_names(),
            client,
            namespace: namespace.into(),
            secret_name: secret_name.into(),
            policy,
            clock,
            registration,
            cert,
        }
    }

    /// The served certificate.
    pub fn cert(&self) -> &Arc<ReloadableCert> {
        &self.cert
    }

    fn api(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn object(&self) -> String {
        format!("{}/{}", self.namespace, self.secret_name)
    }

    /// One pass (see the module docs).
    pub async fn sync(&self) -> Result<SyncOutcome, SyncError> {
        let api = self.api();
        let secret_err = |action| {
            let secret = self.object();
            move |source| SyncError::Secret {
                action,
                secret,
                source,
            }
        };
        let mut renewed = Renewal::Keep;
        let mut stored = None;
        for _ in 0..5 {
            let existing = api
                .get_opt(&self.secret_name)
                .await
                .map_err(secret_err("read"))?;
            let current = existing.as_ref().and_then(decode);
            let now = self.clock.now();
            let renewal = certs::plan(current.as_ref(), &self.names, now);
            if renewal == Renewal::Keep {
                stored = current;
                break;
            }
            let next = certs::renew(current.as_ref(), renewal, &self.names, &self.policy, now)?;
            let mut secret = encode(&next, now);
            secret.metadata.name = Some(self.secret_name.clone());
            secret.metadata.namespace = Some(self.namespace.clone());
            let written = match existing {
                None => api.create(&PostParams::default(), &secret).await,
                Some(old) => {
                    secret.metadata.resource_version = old.metadata.resource_version;
                    api.replace(&self.secret_name, &PostParams::default(), &secret)
                        .await
                }
            };
            match written {
                Ok(_) => {
                    tracing::info!(secret = %self.object(), ?renewal, "renewed webhook certificates");
                    renewed = renewal;
                    stored = Some(next);
                    break;
                }
                // Another replica wrote first: use what it wrote.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(secret_err("write")(e)),
            }
        }
        let Some(stored) = stored else {
            return Err(SyncError::Contended(self.object()));
        };
        let bundle = stored.bundle(self.clock.now());
        let configurations =
            configurations::sync_ca_bundles(&self.client, &self.registration, bundle.as_bytes())
                .await?;
        let reloaded = self.cert.set(&stored.leaf.cert_pem, &stored.leaf.key_pem)?;
        if reloaded {
            tracing::info!(secret = %self.object(), "serving a new webhook certificate");
        }
        Ok(SyncOutcome {
            renewed,
            configurations,
            reloaded,
            bundle,
        })
    }

    /// Passes forever: on every change of the Secret, and at least every `interval`; a failed
    /// pass is retried after a few seconds.
    pub async fn run(self: Arc<Self>, interval: Duration) {
        let watch_config = kube::runtime::watcher::Config::default()
            .fields(&format!("metadata.name={}", self.secret_name));
        let mut changes = kube::runtime::watcher(self.api(), watch_config)
            .default_backoff()
            .boxed();
        loop {
            let wait = match self.sync().await {
                Ok(outcome) => {
                    for (synced, name) in outcome.configurations.iter().zip([
                        &self.registration.mutating_name,
                        &self.registration.validating_name,
                    ]) {
                        if *synced == Synced::Missing {
                            tracing::warn!(
                                configuration = %name,
                                "webhook configuration does not exist; create it (e.g. with the \
                                 Helm chart) or run with --admission-create-configurations"
                            );
                        }
                    }
                    interval
                }
                Err(e) => {
                    tracing::warn!(error = %e, "webhook certificate sync failed");
                    interval.min(Duration::from_secs(5))
                }
            };
            tokio::select! {
                _ = changes.next() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

fn ts(secs: u64) -> String {
    Timestamp::from_second(i64::try_from(secs).unwrap_or(i64::MAX))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn parse_ts(s: &str) -> Option<u64> {
    let t: Timestamp = s.parse().ok()?;
    u64::try_from(t.as_second()).ok()
}

/// The Secret for `stored` (name and namespace unset).
pub fn encode(stored: &Stored, now: std::time::SystemTime) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    let mut data = BTreeMap::from([
        (CA_CERT.to_owned(), bytes(&stored.ca.cert_pem)),
        (CA_KEY.to_owned(), bytes(&stored.ca.key_pem)),
        (TLS_CERT.to_owned(), bytes(&stored.leaf.cert_pem)),
        (TLS_KEY.to_owned(), bytes(&stored.leaf.key_pem)),
        (BUNDLE.to_owned(), bytes(&stored.bundle(now))),
    ]);
    let mut annotations = BTreeMap::from([
        (A_CA_NOT_BEFORE.to_owned(), ts(stored.ca.not_before)),
        (A_CA_NOT_AFTER.to_owned(), ts(stored.ca.not_after)),
        (A_TLS_NOT_BEFORE.to_owned(), ts(stored.leaf.not_before)),
        (A_TLS_NOT_AFTER.to_owned(), ts(stored.leaf.not_after)),
        (A_TLS_NAMES.to_owned(), stored.names.join(",")),
    ]);
    if let Some((pem, not_after)) = &stored.previous_ca {
        data.insert(PREVIOUS_CA.to_owned(), bytes(pem));
        annotations.insert(A_PREVIOUS_CA_NOT_AFTER.to_owned(), ts(*not_after));
    }
    Secret {
        metadata: ObjectMeta {
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "hangar".to_owned(),
                )]
                .into(),
            ),
            annotations: Some(annotations),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// What a Secret holds, or `None` when it is incomplete or unreadable (it is then replaced).
pub fn decode(secret: &Secret) -> Option<Stored> {
    let data = secret.data.as_ref()?;
    let annotations = secret.metadata.annotations.as_ref()?;
    let text = |k: &str| String::from_utf8(data.get(k)?.0.clone()).ok();
    let time = |k: &str| parse_ts(annotations.get(k)?);
    let names = annotations
        .get(A_TLS_NAMES)?
        .split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    let previous_ca = match (text(PREVIOUS_CA), time(A_PREVIOUS_CA_NOT_AFTER)) {
        (Some(pem), Some(at)) => Some((pem, at)),
        _ => None,
    };
    Some(Stored {
        ca: Issued {
            cert_pem: text(CA_CERT)?,
            key_pem: text(CA_KEY)?,
            not_before: time(A_CA_NOT_BEFORE)?,
            not_after: time(A_CA_NOT_AFTER)?,
        },
        leaf: Issued {
            cert_pem: text(TLS_CERT)?,
            key_pem: text(TLS_KEY)?,
            not_before: time(A_TLS_NOT_BEFORE)?,
            not_after: time(A_TLS_NOT_AFTER)?,
        },
        names,
        previous_ca,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn a_secret_round_trips_and_an_incomplete_one_is_replaced() {
        let now = SystemTime::now();
        let names = vec!["127.0.0.1".to_owned()];
        let first = certs::renew(None, Renewal::All, &names, &CertPolicy::default(), now).unwrap();
        let second = certs::renew(
            Some(&first),
            Renewal::All,
            &names,
            &CertPolicy::default(),
            now,
        )
        .unwrap();
        let secret = encode(&second, now);
        assert_eq!(decode(&secret), Some(second.clone()));
        // The stored bundle is what the configurations get.
        let bundle = &secret.data.as_ref().unwrap()[BUNDLE];
        assert_eq!(bundle.0, second.bundle(now).into_bytes());

        let mut broken = secret.clone();
        broken.data.as_mut().unwrap().remove(TLS_KEY);
        assert_eq!(decode(&broken), None);
        let mut no_times = secret;
        no_times.metadata.annotations = None;
        assert_eq!(decode(&no_times), None);
    }
}
