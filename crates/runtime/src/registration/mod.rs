//! Runner registration shared by controllers and admission: how a pod gets its credential
//! ([`mode`]), what the objects holding it are called ([`names`]), and the per-scope token
//! Secrets both write ([`tokens`]).

pub mod mode;
pub mod names;
pub mod tokens;
