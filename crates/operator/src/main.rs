//! `hangar`: the operator binary.
//!
//! Today it prints Hangar's CustomResourceDefinitions (`hangar crd`), the way operators
//! conventionally publish their schema; controllers and webhook servers join as subcommands
//! as they land (see ARCHITECTURE.md for the plan).

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Hangar runs GitHub Actions self-hosted runners as Kubernetes pods, compatible with
/// actions-runner-controller's `actions.summerwind.dev/v1alpha1` API.
#[derive(Debug, Parser)]
#[command(name = "hangar", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as a multi-document YAML stream
    /// (`hangar crd | kubectl apply --server-side -f -`).
    Crd,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Crd => {
            let mut out = std::io::stdout().lock();
            let docs: Vec<String> = hangar_api::crd_files()
                .into_iter()
                .map(|(_, yaml)| yaml)
                .collect();
            if let Err(e) = out.write_all(join_documents(&docs).as_bytes()) {
                eprintln!("error: failed to write CRDs: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Joins YAML documents into one stream, each introduced by `---`.
fn join_documents(docs: &[String]) -> String {
    docs.iter()
        .map(|d| format!("---\n{}", d.trim_start_matches("---\n")))
        .collect::<Vec<_>>()
        .join("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_gets_exactly_one_separator() {
        let joined = join_documents(&["a: 1\n".into(), "---\nb: 2\n".into()]);
        assert_eq!(joined, "---\na: 1\n---\nb: 2\n");
    }
}
