//! Credentials: personal access token, GitHub App installation, or basic auth for API proxies.
//!
//! Credentials can differ per resource (ARC's `githubAPICredentialsFrom` Secret with the keys
//! `github_token`, or `github_app_id` + `github_app_installation_id` +
//! `github_app_private_key`); [`Credentials::from_secret_data`] reads those keys, and
//! [`CredentialKey`] identifies a credential by a hash of its contents so the client registry can
//! share one client (one cache, one rate-limit budget) per distinct credential. Every secret is
//! a [`Secret`], so the derived `Debug` impls below are safe.

pub mod app;

use std::fmt;

use sha2::{Digest, Sha256};

use crate::secret::Secret;

/// ARC's Secret key for a personal access token.
pub const KEY_TOKEN: &str = "github_token";
/// ARC's Secret key for the App id (numeric) or client id (`Iv1.…`, `Iv23…`).
pub const KEY_APP_ID: &str = "github_app_id";
/// ARC's Secret key for the App installation id.
pub const KEY_APP_INSTALLATION_ID: &str = "github_app_installation_id";
/// ARC's Secret key for the App's PEM private key.
pub const KEY_APP_PRIVATE_KEY: &str = "github_app_private_key";

/// How the client authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// A personal access token (classic or fine-grained), sent as `Bearer`.
    Token(Secret),
    /// A GitHub App installation: JWT → installation token, refreshed before it expires.
    App(AppCredentials),
    /// HTTP basic auth, for API proxies that expect it (ARC's `--github-basicauth-*`).
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: Secret,
    },
}

/// A GitHub App installation credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppCredentials {
    /// The App, by numeric id or client id (both are accepted as the JWT issuer).
    pub app: AppIdentifier,
    /// The installation whose token the client uses.
    pub installation_id: u64,
    /// The App's RSA private key, PEM (PKCS#1 `RSA PRIVATE KEY` or PKCS#8 `PRIVATE KEY`).
    pub private_key: Secret,
}

/// How a GitHub App is named in its JWT's `iss` claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AppIdentifier {
    /// The numeric App id.
    Id(u64),
    /// The App's client id (GitHub's recommendation).
    ClientId(String),
}

impl AppIdentifier {
    /// Reads `github_app_id`: digits are an App id, anything else a client id.
    pub fn parse(value: &str) -> Self {
        let value = value.trim();
        match value.parse() {
            Ok(id) => Self::Id(id),
            Err(_) => Self::ClientId(value.to_owned()),
        }
    }
}

impl fmt::Display for AppIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(id) => id.fmt(f),
            Self::ClientId(id) => f.write_str(id),
        }
    }
}

/// Why a Secret's data do not form a credential.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// Neither a token nor a complete App credential is present.
    #[error(
        "no GitHub credentials: set {KEY_TOKEN}, or all of {KEY_APP_ID}, {KEY_APP_INSTALLATION_ID} and {KEY_APP_PRIVATE_KEY} (missing: {missing:?})"
    )]
    Missing {
        /// The App keys that are absent (empty when nothing at all is set).
        missing: Vec<&'static str>,
    },
    /// A value is not UTF-8.
    #[error("{key} is not valid UTF-8")]
    NotUtf8 {
        /// The key.
        key: &'static str,
    },
    /// The installation id is not a number. The value is not repeated: a Secret's field may
    /// hold anything (a token pasted into the wrong key), and this message reaches logs, Events
    /// and status conditions.
    #[error(
        "{KEY_APP_INSTALLATION_ID} must be a number (the installation's id in the App's settings)"
    )]
    InvalidInstallationId,
}

impl Credentials {
    /// A personal access token.
    pub fn token(token: impl Into<Secret>) -> Self {
        Self::Token(token.into())
    }

    /// Reads ARC's Secret keys. A non-empty `github_token` wins (as in ARC); otherwise all
    /// three App keys are required. Values are trimmed, except the private key.
    pub fn from_secret_data<'a, I>(data: I) -> Result<Self, CredentialsError>
    where
        I: IntoIterator<Item = (&'a str, &'a [u8])>,
    {
        let mut token = None;
        let mut app_id = None;
        let mut installation = None;
        let mut key = None;
        for (name, value) in data {
            let slot = match name {
                KEY_TOKEN => (&mut token, KEY_TOKEN),
                KEY_APP_ID => (&mut app_id, KEY_APP_ID),
                KEY_APP_INSTALLATION_ID => (&mut installation, KEY_APP_INSTALLATION_ID),
                KEY_APP_PRIVATE_KEY => (&mut key, KEY_APP_PRIVATE_KEY),
                _ => continue,
            };
            let text = std::str::from_utf8(value)
                .map_err(|_| CredentialsError::NotUtf8 { key: slot.1 })?;
            if !text.trim().is_empty() {
                *slot.0 = Some(text.to_owned());
            }
        }
        if let Some(token) = token {
            return Ok(Self::Token(Secret::new(token.trim())));
        }
        match (app_id, installation, key) {
            (Some(app), Some(installation), Some(key)) => {
                let installation_id = installation
                    .trim()
                    .parse()
                    .map_err(|_| CredentialsError::InvalidInstallationId)?;
                Ok(Self::App(AppCredentials {
                    app: AppIdentifier::parse(&app),
                    installation_id,
                    private_key: Secret::new(key),
                }))
            }
            (app, installation, key) => {
                let missing = [
                    (KEY_APP_ID, app.is_some()),
                    (KEY_APP_INSTALLATION_ID, installation.is_some()),
                    (KEY_APP_PRIVATE_KEY, key.is_some()),
                ]
                .into_iter()
                .filter_map(|(k, present)| (!present).then_some(k))
                .collect::<Vec<_>>();
                let missing = if missing.len() == 3 {
                    Vec::new()
                } else {
                    missing
                };
                Err(CredentialsError::Missing { missing })
            }
        }
    }

    /// `token`, `app` or `basic`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Token(_) => "token",
            Self::App(_) => "app",
            Self::Basic { .. } => "basic",
        }
    }

    /// A stable identity for this credential: kind plus a hash of the contents. Two equal
    /// credentials (e.g. the same Secret referenced by two resources) get the same key.
    pub fn key(&self) -> CredentialKey {
        let mut hash = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        };
        field(self.kind().as_bytes());
        match self {
            Self::Token(token) => field(token.expose().as_bytes()),
            Self::App(app) => {
                field(app.app.to_string().as_bytes());
                field(&app.installation_id.to_be_bytes());
                field(app.private_key.expose().trim().as_bytes());
            }
            Self::Basic { username, password } => {
                field(username.as_bytes());
                field(password.expose().as_bytes());
            }
        }
        let digest = hash.finalize();
        let label = match self {
            Self::App(app) => format!("app-{}-{}", app.app, app.installation_id),
            _ => format!("{}-{}", self.kind(), hex::encode(&digest[..6])),
        };
        CredentialKey {
            digest: digest.into(),
            label,
        }
    }
}

/// Identity of a credential. Its `Display` (e.g. `token-3fa2c4d1e0b9` or `app-123-456`) is
/// safe for logs and metric labels: a short hash, never the secret.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CredentialKey {
    digest: [u8; 32],
    label: String,
}

impl CredentialKey {
    /// The label for logs and metrics.
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl fmt::Display for CredentialKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

impl fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CredentialKey({})", self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a str, &'a [u8])> {
        pairs.iter().map(|(k, v)| (*k, v.as_bytes()))
    }

    #[test]
    fn token_wins_over_app_keys() {
        let creds =
            Credentials::from_secret_data(data(&[(KEY_APP_ID, "1"), (KEY_TOKEN, " ghp_abc\n")]))
                .unwrap();
        assert_eq!(creds, Credentials::token("ghp_abc"));
    }

    #[test]
    fn app_keys_with_client_id() {
        let creds = Credentials::from_secret_data(data(&[
            (KEY_APP_ID, "Iv23liABC"),
            (KEY_APP_INSTALLATION_ID, "42\n"),
            (KEY_APP_PRIVATE_KEY, "-----BEGIN RSA PRIVATE KEY-----\n..."),
            (KEY_TOKEN, ""),
        ]))
        .unwrap();
        let Credentials::App(app) = creds else {
            panic!("not an app: {creds:?}")
        };
        assert_eq!(app.app, AppIdentifier::ClientId("Iv23liABC".into()));
        assert_eq!(app.installation_id, 42);
    }

    #[test]
    fn incomplete_app_keys_say_what_is_missing() {
        let err = Credentials::from_secret_data(data(&[(KEY_APP_ID, "12")])).unwrap_err();
        assert_eq!(
            err,
            CredentialsError::Missing {
                missing: vec![KEY_APP_INSTALLATION_ID, KEY_APP_PRIVATE_KEY]
            }
        );
        let err = Credentials::from_secret_data(data(&[])).unwrap_err();
        assert_eq!(err, CredentialsError::Missing { missing: vec![] });
        let err = Credentials::from_secret_data(data(&[
            (KEY_APP_ID, "12"),
            (KEY_APP_INSTALLATION_ID, "x"),
            (KEY_APP_PRIVATE_KEY, "k"),
        ]))
        .unwrap_err();
        assert!(matches!(err, CredentialsError::InvalidInstallationId));
    }

    /// A value in the wrong key (a token pasted as the installation id) must not come back in
    /// an error, which ends up in logs, Events and status conditions.
    #[test]
    fn an_invalid_installation_id_is_named_not_echoed() {
        let err = Credentials::from_secret_data(data(&[
            (KEY_APP_ID, "12"),
            (KEY_APP_INSTALLATION_ID, "ghp_pastedsecret"),
            (KEY_APP_PRIVATE_KEY, "k"),
        ]))
        .unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("pastedsecret"), "{shown}");
        assert!(shown.contains(KEY_APP_INSTALLATION_ID), "{shown}");
    }

    #[test]
    fn debug_and_keys_never_show_secrets() {
        let all = [
            Credentials::token("ghp_topsecret"),
            Credentials::Basic {
                username: "proxy".into(),
                password: Secret::new("topsecret"),
            },
            Credentials::App(AppCredentials {
                app: AppIdentifier::Id(7),
                installation_id: 8,
                private_key: Secret::new("-----BEGIN topsecret"),
            }),
        ];
        for creds in &all {
            let shown = format!("{creds:?} {} {:?}", creds.key(), creds.key());
            assert!(!shown.contains("topsecret"), "{shown}");
        }
    }

    #[test]
    fn keys_identify_contents() {
        assert_eq!(Credentials::token("a").key(), Credentials::token("a").key());
        assert_ne!(Credentials::token("a").key(), Credentials::token("b").key());
        assert!(Credentials::token("a").key().label().starts_with("token-"));
    }
}
