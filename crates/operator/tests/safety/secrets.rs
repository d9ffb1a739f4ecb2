//! Point 8: secrets stay secret.
//!
//! Every credential the controllers handle (the controller's PAT, a per-resource PAT, a GitHub
//! App's private key, the webhook secret, the registration tokens and JIT configurations GitHub
//! issues) must never reach what users and log collectors read: the controllers' log lines,
//! Events, and the status of any resource. The test runs the end-to-end flow with all of them
//! in play, captures every log line the controllers write at debug level, and scans it all for
//! every secret value used.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hangar_api::{HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerReplicaSet};
use hangar_github::Secret;
use k8s_openapi::api::core::v1::{Event, Secret as KubeSecret};
use kube::ResourceExt;

use hangar_testkit::eventually::eventually_of;

use crate::support::e2e::{Deployment, E2e, WAIT};
use crate::support::{Harness, TOKEN, uncached};

/// A per-resource PAT (the `githubAPICredentialsFrom` Secret of one pool).
const POOL_PAT: &str = "ghp_secrets_pool_credential";
/// The webhook secret shared with GitHub.
const WEBHOOK_SECRET: &str = "whsec-secrets-test-shared";
/// A token a user pasted into the wrong key of an App credentials Secret: no error about that
/// key may repeat it.
const MISPLACED: &str = "ghp_pasted_into_installation_id";
/// The body of an App private key (the PEM markers themselves are not secret).
const APP_KEY_BODY: &str = "MIIEsecretsTestPrivateKeyBody";

/// Log output of every thread of this test's runtime, as the controller process would write it.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

/// Applies Secret `name` with `data` (as stringData) into the test namespace.
fn put_secret(e: &E2e, name: &str, data: serde_json::Value) {
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": data,
    });
    e.h.apply(&secret.to_string());
}

/// Everything users and log collectors can read about the test namespace: Events and the
/// status of every Hangar resource, as JSON.
async fn readable(e: &E2e) -> String {
    let mut out = String::new();
    for event in e.h.list::<Event>().await {
        out.push_str(&serde_json::to_string(&event).unwrap());
        out.push('\n');
    }
    let statuses = [
        status_json(e.h.list::<Runner>().await, |r| &r.status),
        status_json(e.h.list::<RunnerReplicaSet>().await, |r| &r.status),
        status_json(e.h.list::<RunnerDeployment>().await, |r| &r.status),
        status_json(e.h.list::<HorizontalRunnerAutoscaler>().await, |r| {
            &r.status
        }),
    ];
    for status in statuses {
        out.push_str(&status);
        out.push('\n');
    }
    out
}

fn status_json<K, S: serde::Serialize>(objects: Vec<K>, status: impl Fn(&K) -> &S) -> String {
    objects
        .iter()
        .map(|o| serde_json::to_string(status(o)).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every secret value this test's world knows: the ones the test chose, the tokens GitHub
/// issued and the runners' credentials (inside their JIT configurations), and whatever Hangar
/// wrote into its registration Secrets.
async fn secrets_in_play(e: &E2e) -> Vec<String> {
    let mut secrets: Vec<String> = [TOKEN, POOL_PAT, WEBHOOK_SECRET, MISPLACED, APP_KEY_BODY]
        .map(str::to_owned)
        .to_vec();
    e.h.sim.read(|w, _| {
        secrets.extend(w.issued_runner_tokens());
        secrets.extend(w.runners.values().map(|r| r.credential.clone()));
    });
    for secret in e.h.list::<KubeSecret>().await {
        if secret
            .labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str)
            != Some("hangar")
        {
            continue;
        }
        for value in secret.data.unwrap_or_default().into_values() {
            if let Ok(text) = String::from_utf8(value.0) {
                secrets.push(text);
            }
        }
    }
    // Expiry times and such are not secret; every credential is longer than this.
    secrets.retain(|s| s.len() >= 16 && !s.starts_with("20"));
    secrets.sort();
    secrets.dedup();
    secrets
}

// One thread: the capturing subscriber is this thread's default, so it sees every task of the
// controllers, the webhook server and the GitHub client.
#[tokio::test(flavor = "current_thread")]
async fn no_credential_reaches_logs_events_or_status() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "warn,hangar=debug,hangar_github=debug,hangar_core=debug,kube_runtime=debug,\
             kube_client=debug",
        ))
        .finish();
    let _capture = tracing::subscriber::set_default(subscriber);

    let config =
        hangar::webhook_server::WebhookConfig::new(Some(Secret::new(WEBHOOK_SECRET)), false)
            .expect("a secret is configured");
    let (h, hook_url) = Harness::start_with_webhook("secrets", uncached(), |_| {}, config).await;
    let (nodes, runner_faults) = h.start_nodes_with_faults("e2e", "secrets").await;
    let e = E2e {
        h,
        nodes,
        runner_faults,
    };
    e.h.sim.update(|w, _| w.add_pat(POOL_PAT, "pool"));
    e.h.sim.add_hook(ghsim::webhooks::NewHook {
        url: hook_url,
        secret: Some(WEBHOOK_SECRET.to_owned()),
        content_type: ghsim::webhooks::ContentType::Json,
        events: vec!["workflow_job".to_owned()],
        owner: None,
    });

    // Token registration with per-resource credentials; JIT registration with the
    // controller's; and an App credential with the wrong value in one key.
    put_secret(
        &e,
        "pool-credentials",
        serde_json::json!({"github_token": POOL_PAT}),
    );
    put_secret(
        &e,
        "misplaced-credentials",
        serde_json::json!({
            "github_app_id": "12",
            "github_app_installation_id": MISPLACED,
            "github_app_private_key": format!(
                "-----BEGIN RSA PRIVATE KEY-----\n{APP_KEY_BODY}\n-----END RSA PRIVATE KEY-----\n"
            ),
        }),
    );
    let mut tokens = Deployment::new("tokens", 1, "tokens");
    tokens.credentials_secret = Some("pool-credentials".into());
    e.apply(&tokens);
    e.apply(&Deployment::new("jit", 1, "jit").annotation("hangar.dev/registration", "jit"));
    let mut broken = Deployment::new("broken", 1, "broken");
    broken.credentials_secret = Some("misplaced-credentials".into());
    e.apply(&broken);

    let jobs = [
        e.submit(1, "tokens", Duration::from_secs(1), false),
        e.submit(1, "jit", Duration::from_secs(1), false),
    ]
    .concat();
    eventually_of(&e, "both jobs to succeed", WAIT, || async {
        e.all_succeeded(&jobs).then_some(())
    })
    .await;
    eventually_of(
        &e,
        "the misplaced credential to be reported",
        WAIT,
        || async {
            e.h.list::<Event>()
                .await
                .into_iter()
                .find(|ev| ev.reason.as_deref() == Some("GitHubCredentialsError"))
        },
    )
    .await;
    let delivered =
        e.h.sim
            .deliveries()
            .iter()
            .filter(|d| d.event == "workflow_job")
            .count();
    assert!(
        delivered > 0,
        "no workflow_job delivery reached the webhook server"
    );

    let secrets = secrets_in_play(&e).await;
    let logs = captured.text();
    let readable = readable(&e).await;
    // The scan is only worth something if it reads what a leak would be in: the log has the
    // controllers' debug lines and the credentials error, the Events name the bad key.
    assert!(
        logs.contains("github_app_installation_id"),
        "the credentials error was not logged:\n{logs}"
    );
    assert!(
        readable.contains("github_app_installation_id"),
        "{readable}"
    );
    let (issued, jit) = e.h.sim.read(|w, _| {
        (
            w.issued_runner_tokens().len(),
            w.runners.values().filter(|r| r.jit).count(),
        )
    });
    assert!(
        issued > 0 && jit > 0,
        "tokens issued: {issued}, JIT runners: {jit}"
    );
    let mut leaks = Vec::new();
    for secret in &secrets {
        let shown: String = secret.chars().take(12).collect();
        if logs.contains(secret.as_str()) {
            let line = logs
                .lines()
                .find(|l| l.contains(secret.as_str()))
                .unwrap_or_default();
            leaks.push(format!("log: {shown}… in {line}"));
        }
        if readable.contains(secret.as_str()) {
            leaks.push(format!("events/status: {shown}…"));
        }
    }
    assert!(leaks.is_empty(), "secrets leaked:\n{}", leaks.join("\n"));
}
