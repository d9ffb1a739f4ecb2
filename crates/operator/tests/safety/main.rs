//! Hangar's safety promises, each against the real control plane: a busy runner is never
//! killed, an acknowledged job is never lost, a pod is never trusted. One module per promise;
//! every test here failed on the code before the fix it guards.

#[path = "../support/mod.rs"]
mod support;

mod durable;
mod outage;
mod ownership;
mod retire;
mod secrets;
mod servers;
mod sweep;
mod unregistration;
mod validation;
