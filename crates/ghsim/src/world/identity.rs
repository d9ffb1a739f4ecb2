//! Who is calling, and at what cost: rate-limit windows, call accounting, registration and remove
//! tokens.

use std::time::Duration;

use hangar_github::Scope;
use hangar_github::clock::add;
use jiff::Timestamp;

use super::{
    Budget, InstallationTokenRecord, REQUEST_LOG, RecordedRequest, RunnerTokenRecord, SimError,
    TokenKind, World,
};

impl World {
    /// The current window of `label`, opening a new one if the old one reset.
    pub fn budget(&mut self, label: &str, now: Timestamp) -> &mut Budget {
        let limit = self.config.rate_limit;
        let budget = self
            .budgets
            .entry(label.to_owned())
            .or_insert_with(|| Budget {
                limit,
                used: 0,
                reset: add(now, Duration::from_secs(3600)),
            });
        if budget.reset <= now {
            *budget = Budget {
                limit,
                used: 0,
                reset: add(now, Duration::from_secs(3600)),
            };
        }
        budget.limit = limit;
        budget
    }

    /// Logs one request (bounded).
    pub fn record_request(&mut self, request: RecordedRequest) {
        if self.requests.len() >= REQUEST_LOG {
            self.requests.pop_front();
        }
        self.requests.push_back(request);
    }

    /// Counts one call.
    pub fn record_call(&mut self, endpoint: &str, credential: &str, status: u16, charged: bool) {
        let stats = self
            .calls
            .entry((endpoint.to_owned(), credential.to_owned()))
            .or_default();
        stats.calls += 1;
        stats.charged += u64::from(charged);
        stats.not_modified += u64::from(status == 304);
        stats.errors += u64::from(status >= 400);
    }

    // ---- tokens -------------------------------------------------------------------------

    /// Mints a registration or remove token for `scope`.
    pub fn create_runner_token(
        &mut self,
        scope: &Scope,
        kind: TokenKind,
        now: Timestamp,
    ) -> (String, Timestamp) {
        let token = self.random(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 29);
        let expires_at = add(now, self.config.runner_token_ttl);
        self.runner_tokens.insert(
            token.clone(),
            RunnerTokenRecord {
                scope: scope.clone(),
                kind,
                expires_at,
            },
        );
        (token, expires_at)
    }

    pub(super) fn check_runner_token(
        &self,
        token: &str,
        kind: TokenKind,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<(), SimError> {
        match self.runner_tokens.get(token) {
            Some(r) if r.kind == kind && &r.scope == scope && r.expires_at > now => Ok(()),
            Some(r) if r.expires_at <= now => Err(SimError::Unauthorized("token expired".into())),
            _ => Err(SimError::Unauthorized("invalid token".into())),
        }
    }

    /// Mints an installation token (long, `ghs_`-prefixed; never assume 40 characters).
    pub fn create_installation_token(
        &mut self,
        installation_id: u64,
        now: Timestamp,
    ) -> Result<(String, Timestamp), SimError> {
        if !self.installations.contains_key(&installation_id) {
            return Err(SimError::NotFound);
        }
        let token = format!(
            "ghs_{}",
            self.random(
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                76
            )
        );
        let expires_at = add(now, self.config.installation_token_ttl);
        self.installation_tokens.insert(
            token.clone(),
            InstallationTokenRecord {
                installation_id,
                expires_at,
            },
        );
        Ok((token, expires_at))
    }
}
