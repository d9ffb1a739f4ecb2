//! The admission target: the real admission router (`Admission::router`, the routes the HTTPS
//! server serves) answering AdmissionReviews made from real objects.
//!
//! Seeds: reviews of RunnerSet pods as the StatefulSet controller creates them from
//! `examples/runnerset-*.yaml` (registration token and JIT variants, CREATE and dry run) for
//! the mutating route, and reviews of every Runner, RunnerReplicaSet, RunnerDeployment and
//! RunnerSet in `examples/` (CREATE, UPDATE with the same or another old object, DELETE) for
//! the validating routes. The whole review is mutated ([`super::mutate`]), sent mostly to its
//! own route, sometimes to another.
//!
//! The stand-in apiserver knows no objects, so a pod that passes the shape checks is refused
//! (403 in the review) at the owner lookup: the pod route is exercised up to and including
//! `authority::of_pod`, never as far as GitHub.
//!
//! Classes and what each must get:
//! - `over_limit` (a declared `Content-Length` over the limit, or a JSON body over it to a
//!   webhook route): 413; `over_limit_unread` (other bodies over it): a 4xx;
//! - `review` (JSON that decodes as the AdmissionReview wire type with a request, sent as
//!   `application/json`): 200 with a response whose `uid` is the request's; unchanged
//!   examples of valid objects on their own validating route are allowed;
//! - `not_a_review` (anything else): a 4xx.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use hangar::admission::configurations::{Endpoint, POD_PATH, Registration, VALIDATED};
use hangar::admission::review::AdmissionReview;
use hangar::admission::{Admission, AdmissionConfig};
use hangar::credentials::GitHubClients;
use hangar_github::{ClientOptions, Credentials, Endpoint as GitHubEndpoint, GitHubClient};
use serde_json::{Value, json};

use super::http::{BODY_LIMIT, HttpInput, apiserver, send};
use super::mutate::{self, Kind};
use super::{Checked, Outcome, Property, Violation, example_objects};

/// What this target checks, for the results file.
pub const PROPERTIES: &[Property] = &[
    Property {
        name: "over_limit_is_413",
        checked_on: "declared Content-Length over the limit; JSON bodies over it to a webhook route",
    },
    Property {
        name: "over_limit_unread_is_4xx",
        checked_on: "other bodies over the limit (refused before they are read)",
    },
    Property {
        name: "review_is_answered_with_its_uid",
        checked_on: "well-formed reviews: JSON decoding as an AdmissionReview with a request, sent as application/json",
    },
    Property {
        name: "valid_example_is_allowed",
        checked_on: "unchanged reviews of valid example objects on their own validating route",
    },
    Property {
        name: "not_a_review_is_4xx",
        checked_on: "everything else within the limit",
    },
    Property {
        name: "no_5xx",
        checked_on: "every input",
    },
];

/// A review and the route it belongs to.
struct Seed {
    path: String,
    review: Value,
    /// An unchanged copy must be allowed (a valid object on its validating route).
    allowed: bool,
}

/// The target.
pub struct AdmissionTarget {
    seeds: Vec<Seed>,
    router: Router,
    seed: u64,
}

/// A generated request.
pub struct Input {
    pub http: HttpInput,
    pub kind: Kind,
    /// Unchanged, on its own route, of a valid object.
    must_allow: bool,
}

impl AdmissionTarget {
    /// Seeds from `examples/` and the router around a stand-in apiserver.
    pub fn new(seed: u64) -> anyhow::Result<Self> {
        let mut seeds = Vec::new();
        let objects = example_objects()?;
        for (_, object) in &objects {
            let kind = object["kind"].as_str().unwrap_or_default();
            if kind == "RunnerSet" {
                for (jit, dry_run) in [(false, false), (true, false), (false, true)] {
                    seeds.push(Seed {
                        path: POD_PATH.to_owned(),
                        review: review("CREATE", runner_set_pod(object, jit), None, dry_run),
                        allowed: false,
                    });
                }
            }
            let Some((_, _, path)) = VALIDATED.iter().find(|(k, _, _)| *k == kind) else {
                continue;
            };
            let mut changed = object.clone();
            changed["spec"]["replicas"] = json!(3);
            for (operation, old) in [
                ("CREATE", None),
                ("UPDATE", Some(object.clone())),
                ("UPDATE", Some(changed)),
                ("DELETE", Some(object.clone())),
            ] {
                let object_sent = (operation != "DELETE").then(|| object.clone());
                seeds.push(Seed {
                    path: (*path).to_owned(),
                    review: review(operation, object_sent, old, false),
                    allowed: true,
                });
            }
        }
        anyhow::ensure!(
            seeds.iter().any(|s| s.path == POD_PATH),
            "no RunnerSet example to make pod reviews of"
        );
        let github = GitHubClient::new(
            // Never called: no pod gets past the owner lookup. Were one to, the call would be
            // refused at once on loopback's discard port.
            GitHubEndpoint::custom("http://127.0.0.1:9/", "http://127.0.0.1:9/")?,
            Credentials::token("fuzz"),
            ClientOptions::default(),
        )?;
        let clients = Arc::new(GitHubClients::new(Arc::new(github), None));
        let config = AdmissionConfig::new(
            Registration::new(Endpoint::Url("https://127.0.0.1:9443".into())),
            "fuzz",
        );
        let admission = Admission::new(
            apiserver(BTreeMap::new()),
            clients,
            Arc::new(hangar::context::SystemClock),
            config,
        );
        Ok(Self {
            seeds,
            router: hangar::serve::prepare(admission.router()),
            seed,
        })
    }

    /// How many reviews seed the generator.
    pub fn seeds(&self) -> usize {
        self.seeds.len()
    }

    /// Input `index`.
    pub fn generate(&self, index: u64) -> Input {
        let mut rng = mutate::input_rng(self.seed, "admission", index);
        let seed = &self.seeds[rng.usize(0..self.seeds.len())];
        let (kind, body) = mutate::mutated_document(&mut rng, &seed.review);
        let own_route = rng.u32(0..10) > 0;
        let path = if own_route {
            seed.path.clone()
        } else {
            let others: Vec<&str> = std::iter::once(POD_PATH)
                .chain(VALIDATED.iter().map(|(_, _, p)| *p))
                .chain(["/healthz", "/nowhere"])
                .collect();
            others[rng.usize(0..others.len())].to_owned()
        };
        let content_type: &[u8] = match rng.u32(0..20) {
            0 => b"",
            1 => b"text/plain",
            2 => b"application/json; charset=utf-8",
            _ => b"application/json",
        };
        let mut headers = Vec::new();
        if !content_type.is_empty() {
            headers.push(("content-type", content_type.to_vec()));
        }
        let mut http = HttpInput::post(&path, headers, body);
        match rng.u32(0..100) {
            0..94 => http
                .headers
                .push(("content-length", http.body.len().to_string().into_bytes())),
            94..98 => http.streamed = true,
            98 => {
                let declared = rng.u64(BODY_LIMIT as u64 + 1..=u64::MAX);
                http.headers
                    .push(("content-length", declared.to_string().into_bytes()));
            }
            _ => {
                let size = rng.usize(BODY_LIMIT + 1..=2 * BODY_LIMIT);
                http.body.resize(size, b' ');
                http.streamed = true;
            }
        }
        Input {
            must_allow: kind == Kind::Pristine && own_route && seed.allowed,
            http,
            kind,
        }
    }

    /// Sends `input` and checks the answer.
    pub async fn check(&self, input: &Input) -> Result<Outcome, Violation> {
        let http = &input.http;
        let (status, body) = send(&self.router, http).await;
        let code = status.as_u16();
        let mut checked = Checked {
            context: format!(
                "answered {code}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ),
            ..Checked::default()
        };
        let routed = http.path == POD_PATH || VALIDATED.iter().any(|(_, _, p)| *p == http.path);
        let json_type = http
            .header("content-type")
            .is_some_and(|ct| ct.starts_with(b"application/json"));
        let request_uid = serde_json::from_slice::<AdmissionReview>(&http.body)
            .ok()
            .and_then(|r| r.request)
            .map(|r| r.uid);
        let class = if http.declared_over_limit() || (http.body_over_limit() && routed && json_type)
        {
            checked.expect("over_limit_is_413", code == 413)?;
            "over_limit"
        } else if http.body_over_limit() {
            // Refused before the body is read (wrong content type, route or method).
            checked.expect("over_limit_unread_is_4xx", status.is_client_error())?;
            "over_limit_unread"
        } else if let Some(uid) = request_uid.filter(|_| routed && json_type) {
            let answered = serde_json::from_slice::<AdmissionReview>(&body)
                .ok()
                .and_then(|r| r.response);
            checked.expect(
                "review_is_answered_with_its_uid",
                code == 200 && answered.as_ref().is_some_and(|r| r.uid == uid),
            )?;
            if input.must_allow {
                checked.expect(
                    "valid_example_is_allowed",
                    answered.as_ref().is_some_and(|r| r.allowed),
                )?;
            }
            "review"
        } else if routed {
            checked.expect("not_a_review_is_4xx", status.is_client_error())?;
            "not_a_review"
        } else {
            "other_route"
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

/// An AdmissionReview as the apiserver sends it.
fn review(operation: &str, object: Option<Value>, old: Option<Value>, dry_run: bool) -> Value {
    let kind = object
        .as_ref()
        .or(old.as_ref())
        .and_then(|o| o["kind"].as_str())
        .unwrap_or("Pod")
        .to_owned();
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "5d0cf7b1-0f3e-4ba4-9b8f-3c1e0b0f7a11",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.to_lowercase()},
            "namespace": "fuzz",
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:statefulset-controller",
                         "groups": ["system:serviceaccounts"]},
            "object": object,
            "oldObject": old,
            "dryRun": dry_run,
        },
    })
}

/// The pod the StatefulSet controller creates for a RunnerSet's runner: its template, the
/// RunnerSet's scope in the runner container's environment, the injection label and an owner
/// reference to the StatefulSet.
fn runner_set_pod(runner_set: &Value, jit: bool) -> Option<Value> {
    let name = runner_set["metadata"]["name"].as_str().unwrap_or("set");
    let spec = &runner_set["spec"];
    let (variable, value) = [
        ("RUNNER_ENTERPRISE", "enterprise"),
        ("RUNNER_ORG", "organization"),
        ("RUNNER_REPO", "repository"),
    ]
    .into_iter()
    .find_map(|(var, field)| spec[field].as_str().map(|v| (var, v)))
    .unwrap_or(("RUNNER_ORG", "octo"));
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{name}-6d5f7c9b8-0"), "namespace": "fuzz",
            "labels": {
                hangar_api::label::INJECT_REGISTRATION_TOKEN:
                    hangar_api::label::INJECT_REGISTRATION_TOKEN_VALUE,
                hangar_api::label::RUNNERSET_NAME: name,
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                "name": format!("{name}-6d5f7c9b8"), "uid": "0b6f3d38-8d43-4f53-a0c1-2f4d5c9e7a10",
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": spec["template"]["spec"].clone(),
    });
    if jit {
        pod["metadata"]["annotations"] = json!({"hangar.dev/registration": "jit"});
    }
    let containers = pod["spec"]["containers"]
        .as_array_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut containers: Vec<Value> = containers;
    if !containers.iter().any(|c| c["name"] == "runner") {
        containers.push(json!({"name": "runner"}));
    }
    for c in &mut containers {
        if c["image"].is_null() {
            c["image"] = json!("summerwind/actions-runner:latest");
        }
        if c["name"] == "runner" {
            let mut env = c["env"].as_array().cloned().unwrap_or_default();
            env.push(json!({"name": variable, "value": value}));
            c["env"] = Value::Array(env);
        }
    }
    pod["spec"]["containers"] = Value::Array(containers);
    Some(pod)
}
