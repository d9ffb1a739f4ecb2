//! Scenarios: a JSON-lines trace of job submissions over time, replayed against the clock.
//!
//! Each line is a [`TraceLine`]: `at_ms` (offset from the start of the replay) plus the fields
//! of a job submission, e.g.
//! `{"at_ms": 0, "repository": "acme/app", "count": 3, "labels": ["self-hosted"], "duration_ms": 30000}`.
//! Blank lines and lines starting with `#` are ignored; lines must be in time order.

use std::time::Duration;

use hangar_github::clock::{add, until};
use serde::{Deserialize, Serialize};

use crate::sim::Sim;
use crate::world::SubmitJobs;

/// One timed submission.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct TraceLine {
    /// Milliseconds after the replay starts.
    pub at_ms: u64,
    /// What to submit.
    #[serde(flatten)]
    pub submit: SubmitJobs,
}

/// Why a trace was rejected.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A line is not a valid [`TraceLine`].
    #[error("line {line}: {source}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// Lines out of time order.
    #[error("line {line}: at_ms goes backwards")]
    Order {
        /// 1-based line number.
        line: usize,
    },
}

/// Parses a JSON-lines trace.
pub fn parse(text: &str) -> Result<Vec<TraceLine>, TraceError> {
    let mut out: Vec<TraceLine> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let raw = raw.trim();
        if raw.is_empty() || raw.starts_with('#') {
            continue;
        }
        let line: TraceLine = serde_json::from_str(raw).map_err(|source| TraceError::Parse {
            line: i + 1,
            source,
        })?;
        if out.last().is_some_and(|prev| prev.at_ms > line.at_ms) {
            return Err(TraceError::Order { line: i + 1 });
        }
        out.push(line);
    }
    Ok(out)
}

/// Replays a trace: waits on the simulator's clock until each line is due, then submits it.
/// Submissions that fail (unknown repository) are logged and skipped.
pub async fn replay(sim: Sim, lines: Vec<TraceLine>) -> usize {
    let clock = sim.clock();
    let start = clock.now();
    let mut submitted = 0;
    for line in lines {
        let due = add(start, Duration::from_millis(line.at_ms));
        let wait = until(clock.now(), due);
        if !wait.is_zero() {
            clock.sleep(wait).await;
        }
        match sim.update(|w, now| w.submit_jobs(&line.submit, now)) {
            Ok(_) => submitted += 1,
            Err(e) => {
                tracing::warn!(repository = %line.submit.repository, error = %e, "scenario line skipped")
            }
        }
    }
    submitted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_in_order() {
        let trace = "# demo\n{\"at_ms\": 0, \"repository\": \"a/b\", \"count\": 2, \"labels\": [\"x\"]}\n\n{\"at_ms\": 500, \"repository\": \"a/b\"}\n";
        let lines = parse(trace).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].submit.count, 2);
        assert_eq!(lines[1].submit.count, 1);
    }

    #[test]
    fn rejects_disorder_and_garbage() {
        assert!(matches!(
            parse(
                "{\"at_ms\": 5, \"repository\": \"a/b\"}\n{\"at_ms\": 1, \"repository\": \"a/b\"}"
            ),
            Err(TraceError::Order { line: 2 })
        ));
        assert!(matches!(
            parse("{nope"),
            Err(TraceError::Parse { line: 1, .. })
        ));
    }
}
