//! Hangar's GitHub client.
//!
//! Everything Hangar says to GitHub goes through the [`GitHubApi`] trait; [`GitHubClient`] is
//! its HTTP implementation (reqwest on rustls/ring). This crate knows nothing about Kubernetes.
//!
//! # Layout
//! - [`api`]: the trait controllers depend on.
//! - [`client`]: the HTTP client — gate, cache, auth, retries, error mapping, pagination.
//! - [`registry`]: one shared client per distinct credential.
//! - [`auth`]: credentials (PAT, GitHub App, basic), ARC's Secret keys, App JWTs.
//! - [`endpoint`]: github.com / GHE.com / GHES URL rules and overrides.
//! - [`models`]: typed REST resources. [`scope`]: repository / organization / enterprise.
//! - [`cache`], [`ratelimit`], [`retry`]: the pure rules behind the client (freshness,
//!   rate-limit headers, back-off), unit-tested on their own.
//! - [`webhook`]: signature verification and typed webhook payloads.
//! - [`clock`]: injectable wall clock. [`secret`]: redacted strings.
//!
//! # Example
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use hangar_github::{ClientOptions, Credentials, Endpoint, GitHubApi, GitHubClient, Scope};
//! let client = GitHubClient::new(
//!     Endpoint::custom("http://127.0.0.1:8080/", "http://127.0.0.1:8080/")?, // e.g. ghsim
//!     Credentials::token("ghp_..."),
//!     ClientOptions::default(),
//! )?;
//! let runners = client.list_runners(&Scope::org("acme")).await?;
//! # let _ = runners; Ok(()) }
//! ```

pub mod api;
pub mod auth;
pub mod cache;
pub mod client;
pub mod clock;
pub mod endpoint;
pub mod error;
pub mod models;
pub mod ratelimit;
pub mod registry;
pub mod retry;
pub mod scope;
pub mod secret;
pub mod webhook;

pub use api::GitHubApi;
pub use auth::{AppCredentials, AppIdentifier, CredentialKey, Credentials, CredentialsError};
pub use client::{ClientOptions, ClientStats, EndpointStats, GitHubClient, endpoint_template};
pub use clock::{Clock, ManualClock, SystemClock};
pub use endpoint::{Endpoint, EndpointError};
pub use error::{AppAuthError, Call, GitHubError, RateLimitKind};
pub use models::*;
pub use registry::{ClientRegistry, ClientReport};
pub use retry::RetryPolicy;
pub use scope::Scope;
pub use secret::Secret;
