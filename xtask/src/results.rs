//! Reading back the results files that benchmark runs wrote, for commands that compose several
//! runs into one file (`bench-vs-arc`, `bench-knee`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// The JSON of one results file.
pub fn read(file: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))
}

/// Writes `report` as pretty JSON to `relative` under `root` and prints its table; returns where.
pub fn write(root: &Path, relative: &str, report: &Value, table: &str) -> Result<PathBuf> {
    let out = root.join(relative);
    std::fs::write(&out, serde_json::to_string_pretty(report)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    println!("{table}");
    println!("wrote {}", out.display());
    Ok(out)
}

/// Rates as a command line takes them: `2,5,10`.
pub fn rates_arg(rates: &[f64]) -> String {
    rates
        .iter()
        .map(f64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `figures` with `run_succeeded`: whether the run that measured them exited 0.
pub fn with_status(mut figures: Value, status: ExitCode) -> Value {
    figures["run_succeeded"] = json!(status == ExitCode::SUCCESS);
    figures
}

/// Runs a benchmark that writes `file`, after removing any earlier one. A run that wrote no
/// file (its set-up failed on a busy machine) is tried once more; one that wrote it keeps its
/// figures even when it failed, and its status says so.
pub fn run_to_file(file: &Path, mut run: impl FnMut() -> Result<ExitCode>) -> Result<ExitCode> {
    let _ = std::fs::remove_file(file);
    let mut status = ExitCode::FAILURE;
    for _ in 0..2 {
        status = run()?;
        if file.is_file() {
            break;
        }
    }
    Ok(status)
}
