//! ghsim: a GitHub simulator for Hangar's tests and demos.
//!
//! It serves the parts of GitHub Hangar uses — the self-hosted runner, runner-group, workflow
//! run/job and App installation REST endpoints — with GitHub's status codes, headers (ETag,
//! `Cache-Control`, `x-ratelimit-*`) and JSON shapes; routes queued jobs to simulated runners
//! that speak a small runner protocol; sends signed webhooks; injects faults; and accounts
//! for every call and job.
//!
//! # Layout
//! - [`world`]: the state and every transition, synchronous, with `now` as input (one file per
//!   concern under `world/`).
//! - [`routing`]: pure job → runner assignment.
//! - [`render`]: GitHub's JSON shapes.
//! - [`sim`]: [`Sim`], the shared handle (world + clock + faults + hooks).
//! - [`rest`]: the GitHub REST API and the auth/rate-limit/ETag layer around it.
//! - [`runner_api`]: the runner protocol under `/_ghsim/runner/`; [`runner`]: its client.
//! - [`control`]: the control API under `/_ghsim/`, and [`control::Client`], its typed client.
//! - [`webhooks`]: hooks and the delivery log; `delivery`: the sender that posts them.
//! - [`faults`], [`scenario`], [`accounting`].
//! - [`conformance`]: fetches GitHub's OpenAPI description and webhook examples for tests.
//!
//! # Starting one in a test
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let sim = ghsim::Sim::new(ghsim::SimConfig::default());
//! sim.update(|w, _| { w.add_pat("ghp_test", "test"); w.add_repo("acme", "app", true); });
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! tokio::spawn(ghsim::serve(listener, sim.clone(), async { let _ = stopped.await; }));
//! // ... talk to http://{addr}/ ...
//! # let _ = (addr, stop); Ok(()) }
//! ```

// GitHub's repository object has ~50 fields; serde_json's json! macro recurses per field.
#![recursion_limit = "256"]

pub mod accounting;
pub mod conformance;
pub mod conn;
pub mod control;
mod delivery;
pub mod faults;
pub mod http;
pub mod render;
pub mod rest;
pub mod routing;
pub mod runner;
pub mod runner_api;
pub mod scenario;
pub mod sim;
pub mod webhooks;
pub mod world;

use std::future::Future;

use axum::Router;

pub use faults::Faults;
pub use sim::{Sim, SimConfig};
pub use world::{World, WorldConfig};

/// Everything ghsim serves: the GitHub REST API at `/` and, as GitHub Enterprise Server does,
/// at `/api/v3/`; the runner protocol at `/_ghsim/runner/`, the control API at `/_ghsim/`,
/// GitHub's 404 body elsewhere.
pub fn router(sim: Sim) -> Router {
    Router::new()
        .nest("/_ghsim/runner", runner_api::router(sim.clone()))
        .nest("/_ghsim", control::router(sim.clone()))
        .nest(rest::GHES_PREFIX, rest::router(sim.clone()))
        .merge(rest::router(sim))
        .fallback(rest::not_found)
}

/// Serves `sim` on `listener` until `shutdown` resolves. Sets the public URL from the bound
/// address unless one was configured, and starts the webhook sender and the timer ticker.
pub async fn serve(
    listener: tokio::net::TcpListener,
    sim: Sim,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    if sim.public_url().as_str() == WorldConfig::default().public_url.as_str() {
        let url = url::Url::parse(&format!("http://{addr}/")).expect("socket addresses form URLs");
        sim.set_public_url(url);
    }
    let background = delivery::start(&sim);
    let service = router(sim).into_make_service_with_connect_info::<conn::Connection>();
    let result = axum::serve(conn::ResettableListener(listener), service)
        .with_graceful_shutdown(shutdown)
        .await;
    for task in background {
        task.abort();
    }
    result
}

/// A ghsim serving on a loopback port; stops when dropped.
#[derive(Debug)]
pub struct Running {
    /// The simulator.
    pub sim: Sim,
    /// Bound address.
    pub addr: std::net::SocketAddr,
    /// `http://{addr}/`.
    pub url: url::Url,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves `sim` on `127.0.0.1:0` in a background task (for tests and demos).
pub async fn spawn(sim: Sim) -> std::io::Result<Running> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let url = url::Url::parse(&format!("http://{addr}/")).expect("socket addresses form URLs");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task_sim = sim.clone();
    tokio::spawn(async move {
        if let Err(e) = serve(listener, task_sim, async {
            let _ = stopped.await;
        })
        .await
        {
            tracing::error!(error = %e, "ghsim stopped");
        }
    });
    Ok(Running {
        sim,
        addr,
        url,
        stop: Some(stop),
    })
}
