//! Every real example payload of the events Hangar reads parses into the typed structs.
//! Examples come from `@octokit/webhooks-examples` (installed on first use, never vendored).

use hangar_github::webhook::{WebhookEvent, WorkflowJobAction, parse_event};
use serde_json::Value;

fn examples() -> Vec<Value> {
    let file = ghsim::conformance::package_file(
        ghsim::conformance::WEBHOOK_EXAMPLES,
        "api.github.com/index.json",
    )
    .expect("@octokit/webhooks-examples installs (needs npm and the npm registry)");
    let text = std::fs::read_to_string(&file).expect("index.json readable");
    serde_json::from_str(&text).expect("index.json is JSON")
}

fn examples_of(all: &[Value], event: &str) -> Vec<Value> {
    all.iter()
        .find(|e| e["name"] == event)
        .and_then(|e| e["examples"].as_array())
        .unwrap_or_else(|| panic!("no {event} examples"))
        .clone()
}

#[test]
fn every_example_of_the_events_hangar_reads_parses() {
    let all = examples();
    let mut counts = Vec::new();
    for event in ["workflow_job", "check_run", "pull_request", "push", "ping"] {
        let examples = examples_of(&all, event);
        assert!(!examples.is_empty());
        for (i, example) in examples.iter().enumerate() {
            let json = serde_json::to_vec(example).unwrap();
            let parsed =
                parse_event(event, &json).unwrap_or_else(|e| panic!("{event} example {i}: {e:?}"));
            let ok = matches!(
                (event, &parsed),
                ("workflow_job", WebhookEvent::WorkflowJob(_))
                    | ("check_run", WebhookEvent::CheckRun(_))
                    | ("pull_request", WebhookEvent::PullRequest(_))
                    | ("push", WebhookEvent::Push(_))
                    | ("ping", WebhookEvent::Ping(_))
            );
            assert!(ok, "{event} example {i} parsed as {parsed:?}");
        }
        counts.push((event, examples.len()));
    }
    // The package's counts at the pinned version; a change means new shapes to look at.
    assert_eq!(
        counts,
        vec![
            ("workflow_job", 8),
            ("check_run", 9),
            ("pull_request", 29),
            ("push", 7),
            ("ping", 4)
        ]
    );
}

#[test]
fn workflow_job_examples_keep_their_quirks() {
    let all = examples();
    let jobs: Vec<_> = examples_of(&all, "workflow_job")
        .iter()
        .map(
            |e| match parse_event("workflow_job", &serde_json::to_vec(e).unwrap()).unwrap() {
                WebhookEvent::WorkflowJob(job) => job,
                other => panic!("{other:?}"),
            },
        )
        .collect();
    // A queued action whose job waits for an environment approval, with null runner fields.
    let waiting = jobs
        .iter()
        .find(|j| {
            j.action == WorkflowJobAction::Queued
                && j.workflow_job.status == hangar_github::RunStatus::Waiting
        })
        .expect("queued.with-deployment example");
    assert_eq!(waiting.workflow_job.runner_id, None);
    assert_eq!(waiting.workflow_job.labels, vec!["self-hosted", "k8s"]);
    // Completed examples carry a conclusion and the organization.
    for done in jobs
        .iter()
        .filter(|j| j.action == WorkflowJobAction::Completed)
    {
        assert!(done.workflow_job.conclusion.is_some());
        assert!(done.organization.is_some());
    }
    assert!(jobs.iter().any(|j| j.installation.is_some()));
}
