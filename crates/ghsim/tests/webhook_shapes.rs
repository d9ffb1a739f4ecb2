//! ghsim's webhook payloads have the shape of GitHub's real examples
//! (`@octokit/webhooks-examples`): every key that all real examples of an event carry, with
//! the same JSON type wherever both sides are non-null.

use std::collections::BTreeSet;

use ghsim::render;
use ghsim::world::{RegisterRunner, SubmitJobs, TokenKind, World, WorldConfig};
use hangar_github::Scope;
use serde_json::Value;

fn examples(event: &str) -> Vec<Value> {
    let file = ghsim::conformance::package_file(
        ghsim::conformance::WEBHOOK_EXAMPLES,
        "api.github.com/index.json",
    )
    .expect("@octokit/webhooks-examples installs");
    let all: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    all.into_iter()
        .find(|e| e["name"] == event)
        .and_then(|e| e["examples"].as_array().cloned())
        .unwrap()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Keys present in every example at `pointer`, and mismatches of ours against them.
fn compare(ours: &Value, examples: &[Value], pointer: &str) -> Vec<String> {
    let objects: Vec<&serde_json::Map<String, Value>> = examples
        .iter()
        .filter_map(|e| e.pointer(pointer)?.as_object())
        .collect();
    let mut common: BTreeSet<&String> = objects[0].keys().collect();
    for o in &objects[1..] {
        common.retain(|k| o.contains_key(*k));
    }
    let ours = ours
        .pointer(pointer)
        .and_then(Value::as_object)
        .expect("our payload has the object");
    let mut problems = Vec::new();
    for key in common {
        let Some(value) = ours.get(key) else {
            problems.push(format!("{pointer}/{key}: missing"));
            continue;
        };
        let theirs: BTreeSet<&str> = objects
            .iter()
            .map(|o| kind(&o[key]))
            .filter(|k| *k != "null")
            .collect();
        if !value.is_null() && !theirs.is_empty() && !theirs.contains(kind(value)) {
            problems.push(format!(
                "{pointer}/{key}: {} where GitHub sends {theirs:?}",
                kind(value)
            ));
        }
    }
    problems
}

fn world_with_a_finished_job() -> (World, u64) {
    let mut w = World::new(WorldConfig::default());
    w.add_org("acme", Some("big"));
    w.add_repo("acme", "app", true);
    let now = jiff::Timestamp::from_second(1_767_225_600).unwrap();
    let (token, _) = w.create_runner_token(&Scope::org("acme"), TokenKind::Registration, now);
    let (_, cred) = w
        .register_runner(
            RegisterRunner {
                url: "http://x/acme".into(),
                token,
                name: "r".into(),
                labels: vec![],
                no_default_labels: false,
                runner_group: None,
                ephemeral: false,
                replace: false,
            },
            now,
        )
        .unwrap();
    let (_, session) = w.open_session(&cred, None, None, now).unwrap();
    let submit = SubmitJobs {
        repository: "acme/app".into(),
        count: 1,
        labels: vec!["self-hosted".into()],
        duration_ms: 0,
        conclusion: None,
        workflow: None,
        job_name: None,
    };
    w.submit_jobs(&submit, now).unwrap();
    let job = w.poll(&session, now).unwrap().unwrap();
    w.complete_job(&cred, job.id, "success", now).unwrap();
    (w, job.id)
}

#[test]
fn workflow_job_payloads_look_like_githubs() {
    let (mut w, job) = world_with_a_finished_job();
    let sent: Vec<Value> = w
        .drain_events()
        .iter()
        .map(|e| render::emitted(&w, e))
        .collect();
    assert_eq!(sent.len(), 3, "queued, in_progress, completed");
    // Each payload shows the job as it was when the event happened, not as it is when drained.
    let statuses: Vec<&Value> = sent.iter().map(|p| &p["workflow_job"]["status"]).collect();
    assert_eq!(statuses, ["queued", "in_progress", "completed"]);
    let real = examples("workflow_job");
    let mut problems = Vec::new();
    for ours in &sent {
        problems.extend(compare(ours, &real, ""));
        problems.extend(compare(ours, &real, "/workflow_job"));
        problems.extend(compare(ours, &real, "/sender"));
        problems.extend(compare(ours, &real, "/repository/owner"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The comparison bites: a payload without `run_url`, or with a string id, is caught.
    let mut broken = sent[0].clone();
    broken["workflow_job"]
        .as_object_mut()
        .unwrap()
        .remove("run_url");
    broken["workflow_job"]["id"] = Value::String("1".into());
    assert_eq!(compare(&broken, &real, "/workflow_job").len(), 2);
    let completed = render::workflow_job_event(&w, "completed", job);
    assert_eq!(completed["workflow_job"]["conclusion"], "success");
}

#[test]
fn other_event_payloads_look_like_githubs() {
    let (w, job) = world_with_a_finished_job();
    let repo = w.repos.values().next().unwrap().clone();
    let now = jiff::Timestamp::from_second(1_767_225_600).unwrap();
    let sha = "3484a3fb816e0859fd6e1cea078d76385ff50625";
    let mut problems = Vec::new();
    let push = render::push_event(&w, &repo, sha, now);
    problems.extend(compare(&push, &examples("push"), ""));
    let pr = render::pull_request_event(&w, &repo, "opened", 1, sha, now);
    problems.extend(compare(
        &pr,
        &examples("pull_request"),
        "/pull_request/head",
    ));
    let check = render::check_run_event(&w, "completed", job).unwrap();
    problems.extend(compare(&check, &examples("check_run"), ""));
    let ping = render::ping_event(&w, 7, "http://x/hook", &["*".into()], now);
    problems.extend(compare(&ping, &examples("ping"), ""));
    problems.extend(compare(&ping, &examples("ping"), "/hook"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
