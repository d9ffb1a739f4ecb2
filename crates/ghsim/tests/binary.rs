//! The `ghsim` binary starts with one command and serves; `ghsim submit` queues jobs.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn one_command_starts_a_usable_simulator() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ghsim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--token",
            "ghp_cli",
            "--org",
            "acme@big",
            "--repo",
            "acme/app",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("ghsim binary runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("ghsim prints its URL")
        .unwrap()
        .unwrap();
    let url = first
        .strip_prefix("ghsim listening on ")
        .expect("the documented first line")
        .to_owned();

    let http = hangar_github::client::http_builder()
        .unwrap()
        .build()
        .unwrap();
    let runners = http
        .get(format!("{url}enterprises/big/actions/runners"))
        .bearer_auth("ghp_cli")
        .send()
        .await
        .unwrap();
    assert_eq!(runners.status(), 200);

    let submit = Command::new(env!("CARGO_BIN_EXE_ghsim"))
        .args([
            "submit",
            "--url",
            &url,
            "--repository",
            "acme/app",
            "--count",
            "2",
            "--labels",
            "self-hosted,linux",
        ])
        .output()
        .await
        .unwrap();
    assert!(
        submit.status.success(),
        "{}",
        String::from_utf8_lossy(&submit.stderr)
    );
    let state: serde_json::Value = http
        .get(format!("{url}_ghsim/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(
        state["jobs"][0]["labels"],
        serde_json::json!(["self-hosted", "linux"])
    );
    child.kill().await.unwrap();
}
