//! The GitHub webhook target: the real `WebhookServer` router (signature check, event parsing,
//! dedup, autoscaler selection, the batcher and its reservation writer) answering deliveries
//! made from every example of `@octokit/webhooks-examples`.
//!
//! The server's stores hold three autoscalers whose targets match the examples' repositories
//! and labels, so unmutated `workflow_job` deliveries go all the way to a reservation write;
//! the writer patches through the stand-in apiserver ([`super::http::apiserver`]), which
//! answers with the stored autoscaler. Time is tokio's paused clock, so the writer's 20 ms
//! gathering pause costs nothing and the run is deterministic.
//!
//! Each input: one example (a quarter `workflow_job`, a quarter the other handled events, half
//! any of the 58 events), its body mutated ([`super::mutate`]) and
//! maybe form-encoded, headers chosen from right, missing, duplicated, wrong and odd ones, the
//! signature valid over the mutated body (75%) or missing, under another secret, malformed or
//! duplicated; 1% of bodies over the limit (declared, or streamed without a length).
//!
//! Classes and what each must get:
//! - `over_limit` (a declared `Content-Length` over the limit, or a POST of a body over it):
//!   413;
//! - `unsigned` (POST whose first `X-Hub-Signature-256` is not `sha256=` + the HMAC of the body
//!   under the server's secret): 401;
//! - `signed_handled` (POST, signed, the first `X-GitHub-Event` is one Hangar handles:
//!   `workflow_job`, `ping`, `check_run`, `pull_request`, `push`): 200, 202 or 400 — never a
//!   5xx, never 401; the well-formed ones among them (the example's JSON unchanged, its own
//!   event name, a content type that matches the encoding) 200 or 202;
//! - `signed_other` (POST, signed, any other or no event name): 200 or 400;
//! - `other_method` (GET or PUT): anything below 500.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::http::Method;
use hangar::context::Clock;
use hangar::webhook_server::{WebhookConfig, WebhookServer, WebhookStores};
use hangar_github::Secret;
use hangar_github::webhook::sign;
use hangar_testkit::clock::TokioClock;
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::http::{BODY_LIMIT, HttpInput, apiserver, odd_header_value, send};
use super::mutate::{self, Kind};
use super::{Checked, Outcome, Property, Violation};

const SECRET: &str = "fuzz-webhook-secret";
const NAMESPACE: &str = "fuzz";
/// Events the server parses and acts on or answers specifically.
const HANDLED: [&str; 5] = ["workflow_job", "ping", "check_run", "pull_request", "push"];

/// What this target checks, for the results file.
pub const PROPERTIES: &[Property] = &[
    Property {
        name: "over_limit_is_413",
        checked_on: "declared Content-Length over the limit; POSTs of bodies over it",
    },
    Property {
        name: "unsigned_is_401",
        checked_on: "POSTs without a valid signature, within the limit",
    },
    Property {
        name: "signed_handled_is_200_202_or_400",
        checked_on: "signed POSTs of handled events within the limit",
    },
    Property {
        name: "wellformed_is_2xx",
        checked_on: "signed POSTs of an unchanged example under its own event name",
    },
    Property {
        name: "signed_other_is_200_or_400",
        checked_on: "signed POSTs of other or missing event names",
    },
    Property {
        name: "no_5xx",
        checked_on: "every input",
    },
];

/// One real example payload.
struct Example {
    event: String,
    payload: Value,
}

/// The target: examples, and the server under test.
pub struct Webhook {
    examples: Vec<Example>,
    router: Router,
    seed: u64,
}

/// A generated delivery and what the generator knows about it.
pub struct Input {
    pub http: HttpInput,
    pub kind: Kind,
    /// The example's JSON unchanged, under its own event name, encoded as the content type
    /// says.
    wellformed_body: bool,
}

impl Webhook {
    /// The examples from the installed `@octokit/webhooks-examples`, and a server around a
    /// stand-in apiserver. Must run inside the (paused-time) runtime: the writer is spawned.
    pub fn new(seed: u64) -> anyhow::Result<Self> {
        let file = ghsim::conformance::package_file(
            ghsim::conformance::WEBHOOK_EXAMPLES,
            "api.github.com/index.json",
        )?;
        let all: Vec<Value> = serde_json::from_slice(&std::fs::read(&file)?)?;
        let examples: Vec<Example> = all
            .iter()
            .flat_map(|e| {
                let event = e["name"].as_str().unwrap_or_default().to_owned();
                e["examples"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(move |payload| Example {
                        event: event.clone(),
                        payload: payload.clone(),
                    })
            })
            .collect();
        anyhow::ensure!(
            HANDLED
                .iter()
                .all(|h| examples.iter().any(|e| e.event == *h)),
            "{} lacks examples of a handled event",
            file.display()
        );
        let (hras, mut hra_writer) = reflector::store();
        let (deployments, mut rd_writer) = reflector::store();
        let (runner_sets, _) = reflector::store();
        let mut objects = BTreeMap::new();
        for (name, scope, labels) in AUTOSCALED {
            let (rd, hra) = autoscaled(name, scope, labels);
            rd_writer
                .apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(rd.clone())?));
            hra_writer
                .apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(hra.clone())?));
            objects.insert(
                format!(
                    "/apis/actions.summerwind.dev/v1alpha1/namespaces/{NAMESPACE}/horizontalrunnerautoscalers/{name}"
                ),
                hra,
            );
        }
        let stores = WebhookStores {
            hras,
            deployments,
            runner_sets,
        };
        let mut config = WebhookConfig::new(Some(Secret::new(SECRET)), false)?;
        config.limits = hangar::serve::Limits::new(1, BODY_LIMIT);
        // Small enough that eviction happens within a run and the memory it holds stays far
        // below the allocation bound.
        config.dedup_capacity = 10_000;
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::default());
        let server = WebhookServer::new(config, stores, None, clock);
        server.set_metrics(Arc::new(hangar::metrics::Metrics::new()));
        tokio::spawn(server.clone().run_writer(apiserver(objects)));
        Ok(Self {
            examples,
            router: hangar::serve::prepare(server.router()),
            seed,
        })
    }

    /// How many real examples seed the generator.
    pub fn examples(&self) -> usize {
        self.examples.len()
    }

    /// Input `index`: a pure function of the seed and the index.
    pub fn generate(&self, index: u64) -> Input {
        let mut rng = mutate::input_rng(self.seed, "webhook", index);
        // Most examples are of events Hangar ignores: half the inputs come from those it
        // handles, half of these from `workflow_job`, the one it acts on.
        let event = match rng.u32(0..4) {
            0 => Some("workflow_job"),
            1 => Some(HANDLED[rng.usize(1..HANDLED.len())]),
            _ => None,
        };
        let pool: Vec<&Example> = self
            .examples
            .iter()
            .filter(|e| event.is_none_or(|name| e.event == name))
            .collect();
        let example = pool[rng.usize(0..pool.len())];
        // Half the jobs are new ones: a job id seen before is a duplicate, answered before any
        // autoscaler is looked for.
        let fresh;
        let payload = if example.event == "workflow_job" && rng.bool() {
            let mut job = example.payload.clone();
            job["workflow_job"]["id"] = json!(1_000_000 + index);
            fresh = job;
            &fresh
        } else {
            &example.payload
        };
        let (kind, json) = mutate::mutated_document(&mut rng, payload);
        let form = rng.u32(0..20) == 0;
        let body = if form { form_payload(&json) } else { json };
        let mut headers = Vec::new();
        let event = example.event.as_bytes().to_vec();
        match rng.u32(0..100) {
            0..85 => headers.push(("x-github-event", event.clone())),
            85..88 => {}
            88..92 => {
                let other = HANDLED[rng.usize(0..HANDLED.len())];
                headers.push(("x-github-event", other.as_bytes().to_vec()));
            }
            92..94 => headers.push(("x-github-event", odd_header_value(&mut rng))),
            94..97 => {
                let other = HANDLED[rng.usize(0..HANDLED.len())].as_bytes().to_vec();
                let (first, second) = if rng.bool() {
                    (event.clone(), other)
                } else {
                    (other, event.clone())
                };
                headers.push(("x-github-event", first));
                headers.push(("x-github-event", second));
            }
            _ => headers.push(("x-github-event", example.event.to_uppercase().into_bytes())),
        }
        let content_type: &[u8] = match rng.u32(0..20) {
            0 => b"",
            1 => b"text/plain; charset=utf-8",
            _ if form => b"application/x-www-form-urlencoded",
            _ => b"application/json",
        };
        let form_header = content_type.starts_with(b"application/x-www-form-urlencoded");
        if !content_type.is_empty() {
            headers.push(("content-type", content_type.to_vec()));
        }
        match rng.u32(0..100) {
            0..80 => headers.push(("x-github-delivery", format!("d-{index}").into_bytes())),
            // A redelivery of a recent input.
            80..92 => headers.push((
                "x-github-delivery",
                format!("d-{}", index.saturating_sub(rng.u64(1..=50))).into_bytes(),
            )),
            92..96 => {}
            96..99 => headers.push(("x-github-delivery", odd_header_value(&mut rng))),
            _ => headers.push(("x-github-delivery", vec![b'd'; rng.usize(1..=65_536)])),
        }
        let mut http = HttpInput::post("/", headers, body);
        let valid = sign(SECRET.as_bytes(), &http.body).into_bytes();
        match rng.u32(0..100) {
            0..75 => http.headers.push(("x-hub-signature-256", valid)),
            75..80 => {}
            80..85 => http.headers.push((
                "x-hub-signature-256",
                sign(b"another secret", &http.body).into_bytes(),
            )),
            85..88 => {
                // Right digest, other spelling: upper-case hex and blanks around it.
                let hex = String::from_utf8_lossy(&valid[7..]).to_uppercase();
                http.headers.push((
                    "x-hub-signature-256",
                    format!(" sha256={hex} ").into_bytes(),
                ));
            }
            88..91 => http
                .headers
                .push(("x-hub-signature-256", odd_header_value(&mut rng))),
            91..94 => {
                let cut = rng.usize(0..valid.len());
                http.headers
                    .push(("x-hub-signature-256", valid[..cut].to_vec()));
            }
            94..97 => {
                let sha1 = format!("sha1={}", String::from_utf8_lossy(&valid[7..47]));
                http.headers.push(("x-hub-signature", sha1.into_bytes()));
            }
            _ => {
                let wrong = sign(b"another secret", &http.body).into_bytes();
                let (first, second) = if rng.bool() {
                    (valid, wrong)
                } else {
                    (wrong, valid)
                };
                http.headers.push(("x-hub-signature-256", first));
                http.headers.push(("x-hub-signature-256", second));
            }
        }
        match rng.u32(0..100) {
            0..90 => http
                .headers
                .push(("content-length", http.body.len().to_string().into_bytes())),
            90..95 => http.streamed = true,
            95..97 => http.headers.push(("content-length", b"lots".to_vec())),
            97..99 => {
                let declared = rng.u64(BODY_LIMIT as u64 + 1..=u64::MAX);
                http.headers
                    .push(("content-length", declared.to_string().into_bytes()));
            }
            _ => {
                // Over the limit for real: padded with blanks, so still the same JSON.
                let size = rng.usize(BODY_LIMIT + 1..=2 * BODY_LIMIT);
                http.body.resize(size, b' ');
                http.streamed = rng.bool();
                if !http.streamed {
                    http.headers
                        .push(("content-length", size.to_string().into_bytes()));
                }
            }
        }
        match rng.u32(0..100) {
            0..96 => {}
            96..98 => http.path = "/hooks/github?x=1".to_owned(),
            98 => http.method = Method::GET,
            _ => http.method = Method::PUT,
        }
        let wellformed_body = kind == Kind::Pristine
            && http.header("x-github-event") == Some(example.event.as_bytes())
            && form == form_header;
        Input {
            http,
            kind,
            wellformed_body,
        }
    }

    /// Sends `input` and checks what it got.
    pub async fn check(&self, input: &Input) -> Result<Outcome, Violation> {
        let http = &input.http;
        let (status, body) = send(&self.router, http).await;
        let code = status.as_u16();
        let signed = http
            .header("x-hub-signature-256")
            .is_some_and(|v| signature_matches(v, &http.body));
        let event = http.header("x-github-event");
        let handled = event.is_some_and(|e| HANDLED.iter().any(|h| h.as_bytes() == e));
        let mut checked = Checked {
            context: format!(
                "answered {code}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ),
            ..Checked::default()
        };
        let class = if http.declared_over_limit()
            || (http.body_over_limit() && http.method == Method::POST)
        {
            checked.expect("over_limit_is_413", code == 413)?;
            "over_limit"
        } else if http.method != Method::POST {
            "other_method"
        } else if !signed {
            checked.expect("unsigned_is_401", code == 401)?;
            "unsigned"
        } else if handled {
            checked.expect(
                "signed_handled_is_200_202_or_400",
                matches!(code, 200 | 202 | 400),
            )?;
            if input.wellformed_body {
                checked.expect("wellformed_is_2xx", matches!(code, 200 | 202))?;
            }
            "signed_handled"
        } else {
            checked.expect("signed_other_is_200_or_400", matches!(code, 200 | 400))?;
            "signed_other"
        };
        checked.expect("no_5xx", !status.is_server_error())?;
        Ok(Outcome {
            class,
            status: code,
            kind: input.kind,
            checked,
        })
    }
}

/// `payload=` and `json` percent-encoded: a delivery of a webhook set to
/// `application/x-www-form-urlencoded`.
fn form_payload(json: &[u8]) -> Vec<u8> {
    let mut body = b"payload=".to_vec();
    for &b in json {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            body.push(b);
        } else {
            body.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    body
}

/// The oracle for a valid signature, written apart from the server's check: `sha256=` and the
/// hex HMAC of `body` (any case), blanks around it allowed.
fn signature_matches(header: &[u8], body: &[u8]) -> bool {
    let Ok(header) = std::str::from_utf8(header) else {
        return false;
    };
    let expected = sign(SECRET.as_bytes(), body);
    header
        .trim()
        .strip_prefix("sha256=")
        .is_some_and(|hex| hex.eq_ignore_ascii_case(&expected["sha256=".len()..]))
}

/// Autoscaled RunnerDeployments matching the examples' jobs: name, scope field and value,
/// runner labels. (The scope comes from `repository.owner.login` and `repository.name`; some
/// examples' `full_name` names another owner, and `lineville` is a user, whose jobs only
/// repository runners take.)
const AUTOSCALED: [(&str, (&str, &str), &[&str]); 3] = [
    (
        "hello",
        ("repository", "Octocoders/Hello-World"),
        &["ubuntu-latest"],
    ),
    (
        "elastic",
        ("repository", "lineville/elastic-machines-testing"),
        &["k8s"],
    ),
    (
        "gpu",
        ("organization", "octo-org"),
        &["gpu", "db-app", "dc-03"],
    ),
];

/// A RunnerDeployment and the HorizontalRunnerAutoscaler that scales it on `workflow_job`.
fn autoscaled(name: &str, scope: (&str, &str), labels: &[&str]) -> (Value, Value) {
    let rd = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1", "kind": "RunnerDeployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": format!("rd-{name}")},
        "spec": {"template": {"spec": {scope.0: scope.1, "labels": labels}}},
    });
    let hra = json!({
        "apiVersion": "actions.summerwind.dev/v1alpha1", "kind": "HorizontalRunnerAutoscaler",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": format!("hra-{name}"),
                     "resourceVersion": "1"},
        "spec": {
            "scaleTargetRef": {"kind": "RunnerDeployment", "name": name},
            "minReplicas": 0, "maxReplicas": 10,
            "scaleUpTriggers": [{"githubEvent": {"workflowJob": {}}, "duration": "30m"}],
        },
    });
    (rd, hra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_oracle_accepts_only_the_right_digest() {
        let body = b"{}";
        let valid = sign(SECRET.as_bytes(), body);
        assert!(signature_matches(valid.as_bytes(), body));
        assert!(signature_matches(
            format!(" {} ", valid.to_uppercase().replace("SHA256", "sha256")).as_bytes(),
            body
        ));
        assert!(!signature_matches(valid.as_bytes(), b"{ }"));
        assert!(!signature_matches(&valid.as_bytes()[..20], body));
        assert!(!signature_matches(sign(b"other", body).as_bytes(), body));
    }

    #[test]
    fn a_status_outside_a_class_is_a_violation() {
        let mut checked = Checked::default();
        assert!(checked.expect("unsigned_is_401", true).is_ok());
        let err = checked.expect("unsigned_is_401", false).unwrap_err();
        assert_eq!(err.property, "unsigned_is_401");
    }
}
