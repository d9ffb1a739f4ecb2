//! Annotation keys nodesim reads from pods, and the small value grammar they share.
//!
//! Everything here is opt-in per pod, so a workload needs no nodesim-specific spec to run; the
//! keys only select a [program](crate::program) or a fault for tests and demos:
//!
//! | key | value | effect |
//! |---|---|---|
//! | `program.nodesim.hangar.dev/<container>` | a program spec, e.g. `exit(0, 2s)` | what that container runs (init containers too) |
//! | `nodesim.hangar.dev/start-delay` | a duration, e.g. `3s` | sandbox + image pull time for this pod |
//! | `fault.nodesim.hangar.dev/<container>` | `oom`, `crash`, `crash(CODE)`, `kill` | kill the running container once, now |
//!
//! The container name is the annotation key's name part (at most 63 characters, exactly a
//! container name's limit), as the AppArmor annotations did before they became fields.

use std::time::Duration;

/// Prefix of per-container program annotations: `program.nodesim.hangar.dev/<container>`.
pub const PROGRAM_PREFIX: &str = "program.nodesim.hangar.dev/";
/// Prefix of per-container fault annotations: `fault.nodesim.hangar.dev/<container>`.
pub const FAULT_PREFIX: &str = "fault.nodesim.hangar.dev/";
/// Per-pod start delay (sandbox creation and image pulls), overriding the simulator's default.
pub const START_DELAY: &str = "nodesim.hangar.dev/start-delay";

/// Label on every simulated node: the pool (node-name prefix) it belongs to.
pub const POOL_LABEL: &str = "nodesim.hangar.dev/pool";
/// Annotation on every simulated node, naming the simulator that manages it (as KWOK marks its
/// nodes), so humans and tools can tell fake nodes from real ones.
pub const NODE_ANNOTATION: &str = "nodesim.hangar.dev/node";
/// Key of the default `NoSchedule` taint on simulated nodes; workloads tolerate it to land there.
pub const TAINT_KEY: &str = "nodesim.hangar.dev/simulated";

/// The program annotation key for `container`.
pub fn program_key(container: &str) -> String {
    format!("{PROGRAM_PREFIX}{container}")
}

/// The fault annotation key for `container`.
pub fn fault_key(container: &str) -> String {
    format!("{FAULT_PREFIX}{container}")
}

/// A malformed duration such as `5 parsecs`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}: expected a number with a unit ms, s, m or h (e.g. 500ms, 2s)")]
pub struct DurationError(pub String);

/// Parses `250ms`, `2s`, `1.5s`, `3m`, `1h` (and `0`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| DurationError(text.to_owned()))?;
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| DurationError(text.to_owned()))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(DurationError(text.to_owned())),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| DurationError(text.to_owned()))
}

/// Formats a duration the way [`parse_duration`] reads it, in the largest exact unit.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0".to_owned()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit() {
        for (text, want) in [
            ("0", Duration::ZERO),
            ("250ms", Duration::from_millis(250)),
            ("2s", Duration::from_secs(2)),
            ("1.5s", Duration::from_millis(1500)),
            ("3m", Duration::from_secs(180)),
            ("1h", Duration::from_secs(3600)),
            (" 7s ", Duration::from_secs(7)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn durations_without_a_known_unit_are_rejected() {
        for text in ["", "5", "s", "5 s", "5d", "-1s", "1.2.3s"] {
            assert!(parse_duration(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn formatted_durations_parse_back() {
        for d in [0, 1, 999, 1000, 1500, 60_000, 90_000, 3_600_000] {
            let d = Duration::from_millis(d);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
