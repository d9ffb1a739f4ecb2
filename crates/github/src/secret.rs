//! Strings that must never be printed.
//!
//! Tokens, private keys, webhook secrets and JIT configs travel through the client as
//! [`Secret`]. Its `Debug` and `Display` print `[redacted]`, so a secret cannot reach a log line,
//! an Event or an error message by accident, whichever way it is formatted; code that really
//! needs the value (to build an `Authorization` header, to sign, to write a Kubernetes Secret)
//! calls [`Secret::expose`] and the call site shows it.

use std::fmt;

use serde::Deserialize;

/// A secret string: credentials, tokens, keys. `Debug` and `Display` print `[redacted]`;
/// it parses from any string (`FromStr`, so clap reads flags into it). It deserializes
/// (tokens arrive in JSON) but deliberately does not serialize, so it cannot be written into
/// a log line or a status object by accident.
#[derive(Clone, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value. Every call site is a place where the secret leaves its box: keep them
    /// few and never pass the result to a logger.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string (e.g. an unset key in a Kubernetes Secret).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What every formatting of a [`Secret`] prints.
pub const REDACTED: &str = "[redacted]";

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// A `Display` that redacts, rather than none: an error message or a `%` log field that
/// formats a secret then says a secret was there without showing it.
impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(s))
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let secret = Secret::new("ghp_supersecret");
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(format!("{:#?}", Some(&secret)), "Some(\n    [redacted],\n)");
    }

    #[test]
    fn display_never_shows_the_value() {
        let secret = Secret::new("ghp_supersecret");
        assert_eq!(format!("{secret}"), "[redacted]");
        assert_eq!(format!("{secret:>20}"), "[redacted]");
    }

    #[test]
    fn deserializes_from_a_plain_string() {
        let secret: Secret = serde_json::from_str("\"abc\"").unwrap();
        assert_eq!(secret.expose(), "abc");
    }
}
