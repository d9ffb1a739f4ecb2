//! Rewrites `deploy/crds/` from the Rust types: `cargo run -p hangar-api --example gen-crds`.
//!
//! The same job as `cargo xtask crds`, for when only this crate should be built. Files that no
//! longer correspond to a CRD are left alone; the drift test in `tests/crds.rs` reports them.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: failed to create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for (file, yaml) in hangar_api::crd_files() {
        let path = dir.join(&file);
        if let Err(e) = std::fs::write(&path, yaml) {
            eprintln!("error: failed to write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote deploy/crds/{file}");
    }
    ExitCode::SUCCESS
}
