//! Runner pods as the operator reads them ([`observe`]), held in its caches as a
//! [`RunnerPod`] ([`slim`]). The pod builder is [`crate::runner_pod`].

pub mod observe;
pub mod slim;

pub use slim::RunnerPod;
