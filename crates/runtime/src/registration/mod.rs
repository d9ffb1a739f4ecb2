//! Runner registration shared by controllers and admission: how a pod gets its credential
//! ([`mode`]) and what the objects holding it are called ([`names`]).

pub mod mode;
pub mod names;
