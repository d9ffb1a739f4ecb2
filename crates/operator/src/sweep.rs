//! The leaked-registration sweep: every `--leaked-registration-sweep-interval`, the leader
//! removes from GitHub the runners Hangar registered and then lost — a JIT configuration whose
//! pod was never created (offline), a ghost whose pod is gone while its process still holds
//! the registration (online, idle) — as [`hangar_core::sweep`] decides.
//!
//! One pass: *observe* the owners of generated runner names — RunnerReplicaSets,
//! RunnerDeployments and RunnerSets, from the manager's stores — and remember them for
//! [`hangar_core::sweep::remember_for`], so a set a rollout deleted still vouches for its
//! runners; list each of their scopes' runners (revalidating the cached list: an unchanged list
//! is a free 304) with the credentials of the scope's owners; *then* read every live name —
//! runner pods, Runners and runner StatefulSets (stores), each RunnerDeployment's
//! registration-only runner — so that anything registered before the list was taken for a live
//! object is seen live; *decide* per scope; *apply*: DELETE each runner to remove, counted in
//! `hangar_leaked_registrations_removed_total`.
//!
//! The pass reads the cluster only from the stores, which are synced before it first runs:
//! a LIST of a large pool's StatefulSets, even of their metadata alone, parsed every object's
//! `managedFields` and cost a 5,000-runner RunnerSet's controller over 200 MB at each pass.
//! A name a watch has not delivered yet cannot get a registration removed either: a runner
//! that looks leaked is first only suspected, and removed after the grace period.
//!
//! When a runner first looked leaked is kept in memory only: GitHub's runner object has no
//! creation time. After a restart (or a change of leader) every grace period starts over, so a
//! registration leaked by a crash goes a grace period (plus up to two intervals) after the new
//! leader starts. A pass that cannot list a scope's runners on GitHub does nothing there.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use hangar_api::runner_config::RunnerConfig;
use hangar_core::RunnerScope;
use hangar_core::sweep::{self, Connection, Observed, Owner, OwnerKind, Registered, Remembered};
use hangar_github::{GitHubApi, GitHubError, RunnerId, RunnerStatus};
use kube::ResourceExt;
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::credentials::GitHubClients;
use hangar_runtime::pod::observe::github_scope;
use hangar_runtime::registration::names::{placeholder_name, pod_name};

/// Whose credentials list a scope: `None` the controller's, else a Secret in a namespace.
type Credentials = Option<(String, String)>;

/// An owner as the sweep remembers it: the decision's view, its scope and its credentials.
#[derive(Clone, Debug)]
struct Known {
    owner: Owner,
    scope: RunnerScope,
    credentials: Credentials,
}

/// Runs the sweep on `ctx`'s interval until the manager stops (never, if the interval is
/// zero: the sweep is off).
pub async fn run(ctx: Arc<Context>) {
    let period = ctx.settings.leaked_registration_sweep;
    if period.is_zero() {
        return;
    }
    let mut sweeper = Sweeper {
        ctx,
        owners: Remembered::default(),
        suspected: BTreeMap::new(),
    };
    loop {
        tokio::time::sleep(period).await;
        sweeper.pass().await;
    }
}

struct Sweeper {
    ctx: Arc<Context>,
    /// Owners by (kind, namespace, name).
    owners: Remembered<(OwnerKind, String, String), Known>,
    /// Per scope, the runners that looked leaked, with when they first did.
    suspected: BTreeMap<RunnerScope, BTreeMap<u64, SystemTime>>,
}

impl Sweeper {
    async fn pass(&mut self) {
        let settings = &self.ctx.settings;
        let (grace, period) = (
            settings.leaked_registration_grace,
            settings.leaked_registration_sweep,
        );
        let current = self.current_owners();
        let now = self.ctx.now();
        self.owners
            .update(current, now, sweep::remember_for(grace, period));

        let mut scopes: BTreeMap<RunnerScope, (Vec<Owner>, BTreeSet<Credentials>)> =
            BTreeMap::new();
        for (_, known) in self.owners.iter() {
            let (owners, credentials) = scopes.entry(known.scope.clone()).or_default();
            owners.push(known.owner.clone());
            credentials.insert(known.credentials.clone());
        }
        self.suspected.retain(|scope, _| scopes.contains_key(scope));

        let mut listed = Vec::new();
        for (scope, (owners, credentials)) in scopes {
            if let Some((github, runners)) = self.list(&scope, &credentials).await {
                listed.push((scope, owners, github, runners));
            }
        }
        if listed.is_empty() {
            return;
        }
        // After GitHub's lists: a runner registered for a live object before the list was
        // taken has that object in the cluster by now.
        let live = self.live_names();

        let now = self.ctx.now();
        for (scope, owners, github, runners) in listed {
            let suspected = self.suspected.remove(&scope).unwrap_or_default();
            let plan = sweep::plan(&Observed {
                runners: &runners,
                owners: &owners,
                live: &live,
                suspected: &suspected,
                now,
                grace,
            });
            if !plan.suspected.is_empty() {
                debug!(%scope, runners = plan.suspected.len(), "registrations look leaked; waiting out the grace period");
            }
            self.suspected.insert(scope.clone(), plan.suspected);
            for id in plan.remove {
                let name = runners
                    .iter()
                    .find(|r| r.id == id)
                    .map(|r| r.name.as_str())
                    .unwrap_or_default();
                self.remove(github.as_ref(), &scope, id, name).await;
            }
        }
    }

    /// RunnerReplicaSets, RunnerDeployments and RunnerSets in the watched namespaces, with
    /// valid scopes.
    fn current_owners(&self) -> Vec<((OwnerKind, String, String), Known)> {
        let mut owners: Vec<_> = self
            .ctx
            .stores
            .replica_sets
            .state()
            .iter()
            .filter_map(|rs| {
                known(
                    OwnerKind::ReplicaSet,
                    rs.as_ref(),
                    &rs.spec.template.spec.config,
                )
            })
            .collect();
        owners.extend(self.ctx.stores.deployments.state().iter().filter_map(|rd| {
            known(
                OwnerKind::Deployment,
                rd.as_ref(),
                &rd.spec.template.spec.config,
            )
        }));
        owners.extend(
            self.ctx
                .stores
                .runner_sets
                .state()
                .iter()
                .filter_map(|set| known(OwnerKind::RunnerSet, set.as_ref(), &set.spec.config)),
        );
        owners
    }

    /// The scope's runners, listed with the first of `credentials` that works, and that
    /// client (the one to delete with).
    async fn list(
        &self,
        scope: &RunnerScope,
        credentials: &BTreeSet<Credentials>,
    ) -> Option<(Arc<dyn GitHubApi>, Vec<Registered>)> {
        let gh_scope = github_scope(scope);
        for credential in credentials {
            let github = match credential {
                None => self.ctx.github.clone(),
                Some((ns, secret)) => match self.ctx.github_for_secret(ns, Some(secret)).await {
                    Ok(github) => github,
                    Err(e) => {
                        debug!(%scope, error = %e, "no client for the sweep");
                        continue;
                    }
                },
            };
            match github.list_runners_revalidated(&gh_scope).await {
                Ok(runners) => {
                    let runners = runners
                        .into_iter()
                        .map(|r| Registered {
                            id: r.id.0,
                            status: match r.status {
                                RunnerStatus::Offline => Connection::Offline,
                                RunnerStatus::Online => Connection::Online,
                                RunnerStatus::Unknown => Connection::Unknown,
                            },
                            busy: r.busy,
                            labels: r.labels.into_iter().map(|l| l.name).collect(),
                            name: r.name,
                        })
                        .collect();
                    return Some((github, runners));
                }
                Err(e) => debug!(%scope, error = %e, "could not list runners for the sweep"),
            }
        }
        warn!(%scope, "leaked-registration sweep could not list the scope's runners");
        None
    }

    /// Names of every runner pod, Runner, RunnerSet StatefulSet's pod and registration-only
    /// runner in the watched namespaces.
    fn live_names(&self) -> BTreeSet<String> {
        let stores = &self.ctx.stores;
        let mut live: BTreeSet<String> = stores.pods.state().iter().map(|p| p.name_any()).collect();
        live.extend(stores.runners.state().iter().map(|r| r.name_any()));
        live.extend(
            stores
                .deployments
                .state()
                .iter()
                .map(|rd| placeholder_name(&rd.name_any())),
        );
        // Every runner StatefulSet, ARC's (not labelled `runnerset-name`) included: the store
        // holds those labelled with a template hash.
        live.extend(
            stores
                .stateful_sets
                .state()
                .iter()
                .map(|s| pod_name(&s.name_any())),
        );
        live
    }

    async fn remove(&self, github: &dyn GitHubApi, scope: &RunnerScope, id: u64, name: &str) {
        match github
            .delete_runner(&github_scope(scope), RunnerId(id))
            .await
        {
            Ok(()) => {
                info!(%scope, runner = name, id, "removed a leaked runner registration");
                self.ctx
                    .metrics
                    .leaked_registration_removed(scope_kind(scope));
            }
            Err(GitHubError::NotFound { .. }) => {}
            // It took a job since the list: it was not leaked after all.
            Err(GitHubError::RunnerBusy { .. }) => {
                info!(%scope, runner = name, id, "a runner that looked leaked is busy; kept");
            }
            Err(e) => {
                warn!(%scope, runner = name, id, error = %e, "could not remove a leaked runner registration")
            }
        }
    }
}

/// `object` as an owner of generated runner names, if its `config` names a valid scope.
fn known(
    kind: OwnerKind,
    object: &impl ResourceExt,
    config: &RunnerConfig,
) -> Option<((OwnerKind, String, String), Known)> {
    let scope = RunnerScope::from_fields(
        config.enterprise.as_deref(),
        config.organization.as_deref(),
        config.repository.as_deref(),
    )
    .ok()?;
    let (ns, name) = (object.namespace().unwrap_or_default(), object.name_any());
    let credentials = GitHubClients::secret_name(config.github_api_credentials_from.as_ref())
        .map(|secret| (ns.clone(), secret.to_owned()));
    let known = Known {
        owner: Owner {
            kind,
            name: name.clone(),
            labels: config.labels.clone().unwrap_or_default(),
        },
        scope,
        credentials,
    };
    Some(((kind, ns, name), known))
}

/// The metric label of a scope.
fn scope_kind(scope: &RunnerScope) -> &'static str {
    match scope {
        RunnerScope::Enterprise(_) => "enterprise",
        RunnerScope::Organization(_) => "organization",
        RunnerScope::Repository { .. } => "repository",
    }
}
