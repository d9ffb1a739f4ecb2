//! The `Authorization` header of a [`GitHubClient`]'s requests: the PAT, basic credentials, the
//! App's JWT (for `/app/...` calls), or the App's installation token, minted here when there is
//! none or less than `installation_token_margin` of it remains, and forgotten when GitHub
//! answers 401 so that the next attempt mints a new one.
//!
//! Contract: the header value is marked sensitive and no secret reaches a log or an error;
//! concurrent calls mint one installation token, not one each (the token slot is locked while
//! minting).

use reqwest::Method;
use reqwest::header::HeaderValue;

use super::GitHubClient;
use super::transport::{As, Request};
use crate::auth::app::{AppAuth, InstallationToken, still_good};
use crate::error::{AppAuthError, Call, GitHubError};
use crate::secret::Secret;

/// How this client's credential authenticates.
pub(super) enum Auth {
    Token(Secret),
    Basic { username: String, password: Secret },
    App(AppAuth),
}

impl GitHubClient {
    /// The `Authorization` header for a request, minting an installation token if needed.
    pub(super) async fn authorization(&self, who: As) -> Result<HeaderValue, GitHubError> {
        let value = match (&self.inner.auth, who) {
            (Auth::Token(token), _) => format!("Bearer {}", token.expose()),
            (Auth::Basic { username, password }, _) => {
                use base64::Engine;
                let pair = format!("{username}:{}", password.expose());
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                )
            }
            (Auth::App(app), As::AppJwt) => {
                let jwt = app.jwt(self.now()).map_err(|e| self.app_error(e))?;
                format!("Bearer {}", jwt.expose())
            }
            (Auth::App(app), As::Credential) => {
                let token = self.installation_token(app).await?;
                format!("Bearer {}", token.expose())
            }
        };
        let mut value = HeaderValue::from_str(&value).map_err(|e| GitHubError::Build {
            source: Box::new(e),
        })?;
        value.set_sensitive(true);
        Ok(value)
    }

    fn app_error(&self, source: AppAuthError) -> GitHubError {
        match &self.inner.auth {
            Auth::App(app) => GitHubError::AppAuth {
                app: app.creds.app.to_string(),
                installation_id: app.creds.installation_id,
                source: Box::new(source),
            },
            _ => unreachable!("app errors come from app credentials"),
        }
    }

    /// The cached installation token, or a new one when less than the margin remains.
    async fn installation_token(&self, app: &AppAuth) -> Result<Secret, GitHubError> {
        let mut slot = app.slot.lock().await;
        let margin = self.inner.options.installation_token_margin;
        if let Some(token) = slot.as_ref()
            && still_good(token, self.now(), margin)
        {
            return Ok(token.token.clone());
        }
        let url = self.inner.endpoint.api(&[
            "app",
            "installations",
            &app.creds.installation_id.to_string(),
            "access_tokens",
        ]);
        let response = Box::pin(self.send(Request {
            auth: As::AppJwt,
            ..Request::new(Method::POST, url)
        }))
        .await
        .map_err(|e| self.app_error(AppAuthError::Request(e)))?;
        let token: InstallationToken = serde_json::from_slice(&response.body).map_err(|e| {
            self.app_error(AppAuthError::Request(GitHubError::Decode {
                call: Call {
                    method: "POST",
                    path: format!(
                        "/app/installations/{}/access_tokens",
                        app.creds.installation_id
                    ),
                },
                source: e,
            }))
        })?;
        self.inner.counters.installation_token();
        tracing::debug!(credential = %self.inner.key, expires_at = %token.expires_at, "minted installation token");
        let secret = token.token.clone();
        *slot = Some(token);
        Ok(secret)
    }

    /// Whether this client authenticates as a GitHub App (with installation tokens it mints).
    pub(super) fn authenticates_as_app(&self) -> bool {
        matches!(self.inner.auth, Auth::App(_))
    }

    pub(super) async fn forget_installation_token(&self) {
        if let Auth::App(app) = &self.inner.auth {
            *app.slot.lock().await = None;
        }
    }
}
