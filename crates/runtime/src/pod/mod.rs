//! Runner pods as the operator reads them ([`observe`]). The pod builder is
//! [`crate::runner_pod`].

pub mod observe;
