//! What GitHub last said about each registered runner: online, busy, or offline since when.
//!
//! Contract: filled from the runner lists Hangar takes anyway (the runner refresh lists each
//! scope with registered runner pods every [`crate::context::Settings::runner_refresh`],
//! through the caching client), never by a call of its own; read by [`crate::context::Context::runner_health`].
//! A runner of a scope not listed yet is [`GitHubState::Unknown`], which the health classifier
//! never holds against it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use hangar_core::health::GitHubState;
use hangar_github::{Runner, RunnerStatus, Scope};

/// Per scope, per runner name, what GitHub last said (see the module docs).
#[derive(Debug, Default)]
pub struct GitHubRunners {
    scopes: Mutex<HashMap<Scope, HashMap<String, GitHubState>>>,
}

impl GitHubRunners {
    /// Records a fresh list of `scope`'s runners, taken at `now`: runners it does not show are
    /// forgotten.
    pub fn observe(&self, scope: &Scope, listed: &[Runner], now: SystemTime) {
        let mut scopes = self.scopes.lock().expect("github runners lock");
        let before = scopes.remove(scope).unwrap_or_default();
        let after = listed
            .iter()
            .map(|r| {
                let previous = before.get(&r.name).copied().unwrap_or_default();
                let online = r.status == RunnerStatus::Online;
                (r.name.clone(), previous.after(Some((online, r.busy)), now))
            })
            .collect();
        scopes.insert(scope.clone(), after);
    }

    /// What GitHub last said about runner `name` of `scope`.
    pub fn state(&self, scope: &Scope, name: &str) -> GitHubState {
        let scopes = self.scopes.lock().expect("github runners lock");
        scopes
            .get(scope)
            .and_then(|runners| runners.get(name))
            .copied()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn runner(name: &str, status: RunnerStatus, busy: bool) -> Runner {
        serde_json::from_value(serde_json::json!({
            "id": 1, "name": name, "os": "linux", "busy": busy,
            "status": if status == RunnerStatus::Online { "online" } else { "offline" },
        }))
        .unwrap()
    }

    #[test]
    fn offline_since_survives_later_lists_and_unlisted_runners_are_forgotten() {
        let scope = Scope::Organization("octo".into());
        let other = Scope::Organization("other".into());
        let runners = GitHubRunners::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let t1 = t0 + Duration::from_secs(30);
        runners.observe(&scope, &[runner("a", RunnerStatus::Offline, false)], t0);
        runners.observe(
            &scope,
            &[
                runner("a", RunnerStatus::Offline, false),
                runner("b", RunnerStatus::Online, true),
            ],
            t1,
        );
        assert_eq!(runners.state(&scope, "a"), GitHubState::Offline(t0));
        assert_eq!(runners.state(&scope, "b"), GitHubState::Busy);
        assert_eq!(runners.state(&other, "a"), GitHubState::Unknown);
        runners.observe(&scope, &[], t1);
        assert_eq!(runners.state(&scope, "a"), GitHubState::Unknown);
    }
}
