//! The one skeleton every controller's reconcile runs in: what happens around a reconcile, and
//! after it fails.
//!
//! Contract: a controller describes itself with a [`Reconciler`] (its name, whether permanent
//! errors are re-checked, how its errors are explained to a user) and hands
//! [`Reconciler::reconcile`] and [`Reconciler::error_policy`] to `Controller::run`. Then, for
//! every controller alike:
//!
//! - each reconcile runs in a `reconcile` span carrying `controller` and `object`
//!   (`namespace/name`), so every log line inside names what it is about;
//! - its duration and failure are recorded with [`Metrics::reconciled`](crate::metrics::Metrics::reconciled);
//! - a success resets the object's back-off; its key is `{controller}/{namespace}/{name}`;
//! - a failure is one `warn!` with the object, the error and the retry, counted by
//!   [`Backoff::next`](crate::error::Backoff::next), and — when a user must act on it
//!   ([`decide`]) — a Warning Event on the object with the error's
//!   [`category`](crate::error::Error::category) as its reason.
//!
//! Transient Kubernetes API errors are logged only: they are Hangar's to retry, and an Event
//! about them would be one more write to the apiserver that is failing.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use tracing::{Instrument, info_span, warn};

use crate::context::Context;
use crate::error::{Error, Retry};
use crate::pod::observe::object_name;

/// What a permanent error ([`Retry::OnChange`]) waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permanent {
    /// A change of the object.
    AwaitChange,
    /// The sync period, or a change if one comes first: what makes the spec wrong may change
    /// outside the object (the HRA's scale target may be created later; schedules move).
    RecheckAfterSyncPeriod,
}

/// Where an error came from, as far as [`decide`] cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A Kubernetes API call ([`Error::Kube`]).
    Kubernetes,
    /// A GitHub API call ([`Error::GitHub`]).
    GitHub,
    /// The object or its configuration ([`Error::InvalidSpec`], [`Error::Credentials`]).
    Other,
}

impl Source {
    /// The source of `error`.
    pub fn of(error: &Error) -> Self {
        match error {
            Error::Kube { .. } => Self::Kubernetes,
            Error::GitHub { .. } => Self::GitHub,
            Error::InvalidSpec { .. } | Error::Credentials { .. } => Self::Other,
        }
    }
}

/// When a failed object is reconciled again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// When it changes.
    AwaitChange,
    /// After the sync period.
    SyncPeriod,
    /// After the object's back-off delay ([`Backoff::next`](crate::error::Backoff::next)).
    BackOff,
}

/// What to do about a failed reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Publish a Warning Event on the object: a user must act, or should know.
    pub event: bool,
    /// When to retry.
    pub next: Next,
}

/// What to do about an error retried as `retry` from `source`, in a controller whose permanent
/// errors wait as `permanent`. Events for errors a user must act on (permanent, `Slowly`) and
/// for GitHub's transient ones (a rate limit, an outage: a user wants to know why nothing
/// happens); none for transient Kubernetes API errors.
pub fn decide(retry: Retry, source: Source, permanent: Permanent) -> Decision {
    let event = match retry {
        Retry::OnChange | Retry::Slowly => true,
        Retry::Soon { .. } => source == Source::GitHub,
    };
    let next = match (retry, permanent) {
        (Retry::OnChange, Permanent::AwaitChange) => Next::AwaitChange,
        (Retry::OnChange, Permanent::RecheckAfterSyncPeriod) => Next::SyncPeriod,
        (Retry::Slowly | Retry::Soon { .. }, _) => Next::BackOff,
    };
    Decision { event, next }
}

/// A controller, as the skeleton sees it.
pub struct Reconciler<K> {
    controller: &'static str,
    permanent: Permanent,
    explain: fn(&K, &Error) -> String,
}

impl<K> Clone for Reconciler<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Reconciler<K> {}

impl<K> std::fmt::Debug for Reconciler<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("controller", &self.controller)
            .field("permanent", &self.permanent)
            .finish_non_exhaustive()
    }
}

/// The note of a failure's Event when the controller does not explain: the error.
fn as_is<K>(_: &K, error: &Error) -> String {
    error.to_string()
}

impl<K> Reconciler<K>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    /// The controller named `controller` (its metrics label and back-off key prefix), whose
    /// permanent errors wait for a change and whose Events say the error as it is.
    pub const fn new(controller: &'static str) -> Self {
        Self {
            controller,
            permanent: Permanent::AwaitChange,
            explain: as_is::<K>,
        }
    }

    /// Permanent errors are re-checked after the sync period too.
    pub const fn recheck_permanent_errors(mut self) -> Self {
        self.permanent = Permanent::RecheckAfterSyncPeriod;
        self
    }

    /// The note of a failure's Event is `explain(object, error)`.
    pub const fn explained_by(mut self, explain: fn(&K, &Error) -> String) -> Self {
        self.explain = explain;
        self
    }

    /// The controller's name.
    pub fn controller(&self) -> &'static str {
        self.controller
    }

    /// The back-off key of the object named `namespace/name`.
    fn key(&self, object: &str) -> String {
        format!("{}/{object}", self.controller)
    }

    /// `reconcile`, in a span naming the controller and the object, with its duration and
    /// failure recorded and the object's back-off reset after a success. The controller's state
    /// `S` is the [`Context`] or a state of its own that holds one.
    pub fn reconcile<S, F, Fut>(
        self,
        mut reconcile: F,
    ) -> impl FnMut(Arc<K>, Arc<S>) -> BoxFuture<'static, Result<Action, Error>>
    where
        S: AsRef<Context> + Send + Sync + 'static,
        F: FnMut(Arc<K>, Arc<S>) -> Fut,
        Fut: Future<Output = Result<Action, Error>> + Send + 'static,
    {
        move |object, state| {
            let name = object_name(object.as_ref());
            let span = info_span!("reconcile", controller = self.controller, object = %name);
            let key = self.key(&name);
            let run = reconcile(object, state.clone());
            let controller = self.controller;
            Box::pin(
                async move {
                    let started = Instant::now();
                    let active = (*state).as_ref().metrics.reconcile_started(controller);
                    let result = run.await;
                    drop(active);
                    let ctx: &Context = (*state).as_ref();
                    ctx.metrics
                        .reconciled(controller, started.elapsed(), result.is_err());
                    if result.is_ok() {
                        ctx.backoff.reset(&key);
                    }
                    result
                }
                .instrument(span),
            )
        }
    }

    /// The error policy: [`Reconciler::on_error`].
    pub fn error_policy<S>(self) -> impl Fn(Arc<K>, &Error, Arc<S>) -> Action
    where
        S: AsRef<Context>,
    {
        move |object, error, state| self.on_error(&object, error, (*state).as_ref())
    }

    /// Logs `error`, counts it in `object`'s back-off, publishes a Warning Event when
    /// [`decide`] says so, and says when to retry.
    pub fn on_error(&self, object: &K, error: &Error, ctx: &Context) -> Action {
        let name = object_name(object);
        let decision = decide(error.retry(), Source::of(error), self.permanent);
        let backed_off = ctx.backoff.next(&self.key(&name), error);
        let action = match decision.next {
            Next::AwaitChange => Action::await_change(),
            Next::SyncPeriod => Action::requeue(ctx.settings.sync_period),
            Next::BackOff => backed_off,
        };
        warn!(controller = self.controller, object = %name, %error, retry = ?action, "reconcile failed");
        if decision.event {
            let event = Event {
                type_: EventType::Warning,
                reason: error.category().into(),
                note: Some((self.explain)(object, error)),
                action: "Reconcile".into(),
                secondary: None,
            };
            ctx.events.publish(event, object.object_ref(&()));
        }
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Settings, Stores};
    use crate::error::{SLOW_FIRST, TRANSIENT_FIRST};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use std::time::Duration;

    #[test]
    fn every_retry_and_source_has_a_decision() {
        use Next::{AwaitChange, BackOff, SyncPeriod};
        use Source::{GitHub, Kubernetes, Other};
        let (wait, recheck) = (Permanent::AwaitChange, Permanent::RecheckAfterSyncPeriod);
        let soon = Retry::Soon { not_before: None };
        let later = Retry::Soon {
            not_before: Some(Duration::from_secs(30)),
        };
        let table = [
            // retry, source, permanent errors wait for → event, next
            (Retry::OnChange, Other, wait, true, AwaitChange),
            (Retry::OnChange, Other, recheck, true, SyncPeriod),
            (Retry::OnChange, GitHub, wait, true, AwaitChange),
            (Retry::OnChange, Kubernetes, wait, true, AwaitChange),
            (Retry::OnChange, Kubernetes, recheck, true, SyncPeriod),
            (Retry::Slowly, Other, wait, true, BackOff),
            (Retry::Slowly, Other, recheck, true, BackOff),
            (Retry::Slowly, GitHub, wait, true, BackOff),
            (Retry::Slowly, GitHub, recheck, true, BackOff),
            (Retry::Slowly, Kubernetes, wait, true, BackOff),
            (soon, GitHub, wait, true, BackOff),
            (later, GitHub, recheck, true, BackOff),
            (soon, Kubernetes, wait, false, BackOff),
            (soon, Kubernetes, recheck, false, BackOff),
            (later, Kubernetes, wait, false, BackOff),
            (soon, Other, wait, false, BackOff),
        ];
        for (retry, source, permanent, event, next) in table {
            assert_eq!(
                decide(retry, source, permanent),
                Decision { event, next },
                "{retry:?} from {source:?}, {permanent:?}"
            );
        }
    }

    #[test]
    fn errors_have_the_sources_and_retries_the_table_assumes() {
        let kube = Error::Kube {
            action: "get pod",
            object: "ns/p".into(),
            source: kube::Error::TlsRequired,
        };
        let github = |source| Error::GitHub {
            action: "list runners",
            scope: "octo".into(),
            source,
        };
        let call = || hangar_github::Call {
            method: "GET",
            path: "/orgs/octo/actions/runners".into(),
        };
        let server = github(hangar_github::GitHubError::Server {
            call: call(),
            status: 502,
            attempts: 3,
            message: String::new(),
        });
        let forbidden = github(hangar_github::GitHubError::Forbidden {
            call: call(),
            message: String::new(),
        });
        let invalid = Error::InvalidSpec {
            object: "ns/x".into(),
            reason: "no".into(),
        };
        let credentials = Error::Credentials {
            secret: "ns/s".into(),
            problem: crate::credentials::CredentialProblem::SecretNotFound,
        };
        let soon = Retry::Soon { not_before: None };
        for (error, source, retry) in [
            (&kube, Source::Kubernetes, soon),
            (&server, Source::GitHub, soon),
            (&forbidden, Source::GitHub, Retry::Slowly),
            (&invalid, Source::Other, Retry::OnChange),
            (&credentials, Source::Other, Retry::Slowly),
        ] {
            assert_eq!(
                (Source::of(error), error.retry()),
                (source, retry),
                "{error}"
            );
        }
    }

    /// A context whose apiserver answers nothing: the wrapper must not need it.
    fn context() -> Context {
        let apiserver = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(503)
                    .body(String::new())
                    .unwrap(),
            )
        });
        let client = kube::Client::new(apiserver, "default");
        let github = hangar_github::GitHubClient::new(
            hangar_github::Endpoint::github_com(),
            hangar_github::Credentials::token("unused"),
            hangar_github::ClientOptions::default(),
        )
        .unwrap();
        let stores = Stores {
            pods: reflector::store().0,
            runners: reflector::store().0,
            replica_sets: reflector::store().0,
            deployments: reflector::store().0,
            hras: reflector::store().0,
            runner_sets: reflector::store().0,
            stateful_sets: reflector::store().0,
            nodes: None,
        };
        Context::new(client, Arc::new(github), Settings::default(), stores)
    }

    fn config_map() -> Arc<ConfigMap> {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.name = Some("cm".into());
        Arc::new(cm)
    }

    #[tokio::test]
    async fn the_wrapper_records_both_outcomes_and_resets_the_back_off_on_success() {
        let ctx = Arc::new(context());
        fn kube_error() -> Error {
            Error::Kube {
                action: "get configmap",
                object: "ns/cm".into(),
                source: kube::Error::TlsRequired,
            }
        }
        let key = "test/ns/cm";
        let skeleton = Reconciler::<ConfigMap>::new("test");
        let mut fail = skeleton.reconcile(|_, _: Arc<Context>| async { Err(kube_error()) });
        let mut succeed = skeleton
            .reconcile(|_, _: Arc<Context>| async { Ok(Action::requeue(Duration::from_secs(7))) });

        assert!(fail(config_map(), ctx.clone()).await.is_err());
        // The error policy counts failures; two of them, then a success.
        ctx.backoff.next(key, &kube_error());
        ctx.backoff.next(key, &kube_error());
        assert_eq!(
            succeed(config_map(), ctx.clone()).await.unwrap(),
            Action::requeue(Duration::from_secs(7))
        );
        assert_eq!(
            ctx.backoff.next(key, &kube_error()),
            Action::requeue(TRANSIENT_FIRST),
            "a success resets the back-off of {key}"
        );

        let text = ctx.metrics.render(&crate::metrics::ScrapeState::default());
        for line in [
            "hangar_reconcile_errors_total{controller=\"test\"} 1",
            "hangar_reconcile_duration_seconds_count{controller=\"test\"} 2",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[tokio::test]
    async fn the_policy_backs_off_per_object_and_rechecks_permanent_errors_when_told() {
        let ctx = context();
        let cm = config_map();
        let credentials = Error::Credentials {
            secret: "ns/s".into(),
            problem: crate::credentials::CredentialProblem::SecretNotFound,
        };
        let invalid = Error::InvalidSpec {
            object: "ns/cm".into(),
            reason: "no".into(),
        };
        let plain = Reconciler::<ConfigMap>::new("plain");
        let rechecking = Reconciler::<ConfigMap>::new("rechecking").recheck_permanent_errors();
        assert_eq!(
            plain.on_error(&cm, &credentials, &ctx),
            Action::requeue(SLOW_FIRST)
        );
        assert_eq!(
            plain.on_error(&cm, &credentials, &ctx),
            Action::requeue(SLOW_FIRST * 2)
        );
        // Another controller's key for the same object starts afresh.
        assert_eq!(
            rechecking.on_error(&cm, &credentials, &ctx),
            Action::requeue(SLOW_FIRST)
        );
        assert_eq!(plain.on_error(&cm, &invalid, &ctx), Action::await_change());
        assert_eq!(
            rechecking.on_error(&cm, &invalid, &ctx),
            Action::requeue(ctx.settings.sync_period)
        );
    }
}
